"""Each application of a multi-plan on the one firing loop (`runtime.loop`): its plan compiled
and bound as a single plan's (`runtime.engine.bind`), its own `Stream` whose arrivals are its
releases, and what it measured. Both multi-CNN engines build these: the thread engine
(`runtime.py`) every application's workers in one interpreter, the process engine (`procs.py`)
in each element's process those of that element.

Releases: frame k of an application of period P is released at k * P from the common start;
period 0 runs free (a frame is released as soon as there is room). At most `max_in_flight`
frames of an application are in the run at once: its (k+1)-th completed frame lets frame
k + max_in_flight enter (`Admission`), so a source that outruns the application is held back
(a late release, still measured from its nominal release) rather than flooding the channels.
"""
from __future__ import annotations

import itertools
import math
import threading
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from hetflow.errors import InputError
from hetflow.plan.orders import frames_ahead
from hetflow.plan.program import DELIVER, FIRE, Program, compile_programs
from hetflow.plan.schedule import InOrder, firings
from hetflow.runtime.engine import Delivery, PreparedPlan, bind
from hetflow.runtime.harness import Control
from hetflow.runtime.inputs import _NP, random_source
from hetflow.runtime.loop import Stream, Tenant, Worker

from hetflow.multi.multiplan import AppEntry, MultiPlan

MORE_FRAMES = 1_000_000  # at most this many frames beyond the target an application is sized
FREE_RUNNING = 8  # a free-running application is sized for this many times the target


def hosts(mp: MultiPlan) -> dict[str, list[str]]:
    """element -> the applications with a firing on it (replica groups are refused)."""
    out: dict[str, list[str]] = {}
    for a in mp.apps:
        for actor in a.plan.app.phases:
            if "|" in actor:
                raise InputError(f"application {a.name}: replica group {actor!r} is not "
                                 "supported in a multi-application plan")
            out.setdefault(actor, [])
            if a.name not in out[actor]:
                out[actor].append(a.name)
    return out


def prioritise(prepared: PreparedPlan, rank: int, of: int) -> None:
    """Give the device runners of one application the `rank`-th of `of` stream priorities
    (0: the highest; runners without priorities, such as CPU sessions, are left alone)."""
    for r in prepared.every_runner:
        if hasattr(r, "set_priority"):
            r.set_priority(rank, of)


def check_in_flight(mp: MultiPlan, max_in_flight: int) -> None:
    """An application whose stages run frames ahead (interleaved phases) holds that many more
    frames at once: fewer allowed in the run would stall it."""
    for a in mp.apps:
        need = frames_ahead(a.plan.mapping) + 1
        if max_in_flight < need:
            raise InputError(f"--max-in-flight {max_in_flight}: application {a.name} runs its "
                             f"stages interleaved, {need} frames at once; give at least {need}")


def frames_per_app(mp: MultiPlan, target: int) -> list[int]:
    """How many frames each application is given: the run ends once every one has completed
    `target`, and until then the others keep running beside it (each is sized to go on at
    its period until the slowest periodic one is done; a free-running one FREE_RUNNING times
    the target), never more than MORE_FRAMES beyond the target."""
    horizon = max((target * a.release_every for a in mp.apps if a.period > 0), default=0.0)
    out = []
    for a in mp.apps:
        more = (math.ceil(horizon / a.release_every) if a.period > 0
                else (FREE_RUNNING - 1) * target)
        out.append(target + min(more, MORE_FRAMES))
    return out


class Admission:
    """When each frame of one application enters the run: its release (k * period from the
    start; period 0: as soon as there is room), but not before fewer than `limit` of its frames
    are in the run. `arrive_at` is its `Stream`'s (infinite: not yet admitted); `release` the
    nominal release each response is measured from."""

    def __init__(self, period: float, frames: int, limit: int, wakes: list[threading.Event]):
        self.period, self.limit, self.wakes = period, limit, wakes
        self.arrive_at = np.full(frames, np.inf)
        self.release = np.full(frames, np.nan)
        self.completed_at: list[float] = []  # each completion, as `completed` heard of it
        self._next = itertools.count(limit)  # the frame the next completion admits

    def start(self, t0: float) -> None:
        first = min(self.limit, len(self.arrive_at))
        if self.period > 0:
            self.release[:] = t0 + np.arange(len(self.release)) * self.period
        else:
            self.release[:first] = t0
        self.arrive_at[:first] = self.release[:first]

    def completed(self, now: float) -> None:
        """One frame completed (from any thread, once per frame): the next may enter."""
        self.completed_at.append(now)
        g = next(self._next)  # one C call: atomic under the GIL
        if g >= len(self.arrive_at):
            return
        if self.period > 0:
            self.arrive_at[g] = max(now, self.release[g])
        else:
            self.release[g] = self.arrive_at[g] = now
        for ev in self.wakes:  # its first stage's driver may be waiting for it
            ev.set()


def peak_in_flight(entered: np.ndarray, done: np.ndarray) -> int:
    """The most frames in the run at once, from when frames entered and when frames completed
    (NaN: never), in any order: the count at an instant is how many entered by then less how
    many completed by then. Completions are the admission's (`Admission.completed_at`), not
    the in-order releases: a frame its lane finished ahead of an earlier one has left the run,
    and let the next one in, before it is released in order."""
    entered = np.sort(entered[np.isfinite(entered)])  # threads admit frames a hair apart
    if not len(entered):
        return 0
    ends = np.sort(np.where(np.isnan(done), np.inf, done))
    inside = (np.searchsorted(entered, entered, "right")
              - np.searchsorted(ends, entered, "right"))
    return int(inside.max())


@dataclass
class AppRun:
    """One application on the loop: its workers (those of `elements`, or all), stream, frames
    in order, admission and what it keeps for the reference check."""

    index: int
    entry: AppEntry
    frames: int
    stream: Stream
    order: InOrder
    sink: Delivery
    admission: Admission
    workers: list[Worker]
    loads: bool  # its workers here load its frames (the first stage: frames enter here)
    delivers: bool  # its workers here deliver its model outputs (frames complete here)

    @property
    def name(self) -> str:
        return self.entry.name

    def tenants(self) -> list[Tenant]:
        return [Tenant(self.name, self.stream, w) for w in self.workers]

    def start(self, t0: float) -> None:
        self.admission.start(t0)

    def done(self) -> int:
        """Frames completed so far, counted in order (from one thread)."""
        self.order.release(self.frames)
        return self.order.next

    def measured(self, warmup: int, n_check: int) -> dict:
        """What it measured here (picklable; `app_results` merges the parts of several
        processes): the releases and entries of the frames admitted, where it loads them;
        their completions (in order) and the outputs kept for the check, where it delivers
        them; the seconds its firings here ran per frame, their trace events (if traced) and
        each element's busy seconds."""
        busy: dict[str, float] = {}
        for (el, _), b in self.stream.busy.items():
            busy[el] = busy.get(el, 0.0) + b / self.entry.plan.mapping.lanes_of(el)
        n = self.done()
        admitted = int(np.sum(np.isfinite(self.admission.arrive_at)))  # (a prefix)
        times = self.stream.events
        return {"release": self.admission.release[:admitted] if self.loads else None,
                "arrive": self.admission.arrive_at[:admitted] if self.loads else None,
                "completed_at": (np.array(self.admission.completed_at) if self.loads
                                 else None),
                "period": self.entry.period,
                "done": self.order.finished[:n] if self.delivers else None,
                "kept": {f: self.sink.outputs[f] for f in range(warmup, min(n, warmup + n_check))
                         if f in self.sink.outputs},
                "execs": times.execs, "task_times": times.tasks, "busy": busy,
                "events": [(me, f"{self.name}:{actor}", ph, f, t0, t1)
                           for me, actor, ph, f, t0, t1 in times.events or ()]}


def app_results(parts: list[dict]) -> dict:
    """One application's results from what each process measured of it (`AppRun.measured`):
    per frame completed in order its response from the nominal release, completion time and
    seconds of firings (in all, and per task); late releases, the most frames in flight at
    once, the kept outputs, the busy seconds per element and the trace events."""
    loader = next(p for p in parts if p["release"] is not None)
    done = next(p["done"] for p in parts if p["done"] is not None)
    n = len(done)
    release, arrive = loader["release"], loader["arrive"]
    busy: dict[str, float] = {}
    for p in parts:
        for el, b in p["busy"].items():
            busy[el] = busy.get(el, 0.0) + b
    late = int(np.sum(arrive[:n] > release[:n])) if loader["period"] > 0 else 0
    return {"responses": (done - release[:n]).tolist(), "done_at": done.tolist(),
            "execs": sum(p["execs"][:n] for p in parts).tolist(),
            "task_times": {t: sum(p["task_times"][t][:n] for p in parts if t in p["task_times"])
                           for t in {t for p in parts for t in p["task_times"]}},
            "late_releases": late,
            "peak_in_flight": peak_in_flight(arrive, loader["completed_at"]),
            "kept": {f: x for p in parts for f, x in p["kept"].items()}, "busy": busy,
            "events": [ev for p in parts for ev in p["events"]]}


class FiringTimes:
    """A stream's trace events as the loop appends them (`Stream.events`): the seconds each
    frame's firings ran, summed per frame, and per task (actor#phase) the seconds of each
    frame's firing of it; the events themselves only if `keep` (a trace)."""

    def __init__(self, frames: int, keep: bool):
        self.frames = frames
        self.tasks: dict[str, np.ndarray] = {}
        self.events: list | None = [] if keep else None
        self.lock = threading.Lock()  # several elements' threads fire one frame

    @property
    def execs(self) -> np.ndarray:
        """Per frame, the seconds all its firings ran: the sum over its tasks."""
        return sum(self.tasks.values(), np.zeros(self.frames))

    def append(self, ev: tuple) -> None:
        _, actor, phase, f, t0, t1 = ev
        task = f"{actor}#{phase}"
        with self.lock:
            if task not in self.tasks:
                self.tasks[task] = np.zeros(self.frames)
            self.tasks[task][f] += t1 - t0
        if self.events is not None:
            self.events.append(ev)

    def __iadd__(self, evs: list[tuple]) -> "FiringTimes":  # a batch's firing, frame by frame
        for ev in evs:
            self.append(ev)
        return self


def app_run(index: int, entry: AppEntry, pp: PreparedPlan, frames: int, control: Control,
            limit: int, keep: Callable[[int], bool], seed: int,
            wakes: dict[str, threading.Event], trace: bool = False,
            elements: set[str] | None = None,
            channels: dict | None = None,
            elsewhere: Callable[[], None] | None = None,
            forward: Callable[[int, dict, int], None] | None = None) -> AppRun:
    """Application `entry` compiled and bound on the loop: the workers of `elements` (all if
    None) with `channels` (in-process ones if None), each listening on its element's wake.
    A frame completed here lets the next enter (its admission here) and calls `elsewhere()`,
    which tells the processes that load frames elsewhere the same.
    `forward(f, outputs, by)`: where the workers here hand the outputs they deliver, if another
    process completes the frames (the outputs only of frames kept for the check)."""
    plan = entry.plan
    programs: list[Program] = compile_programs(plan)
    delivering = sorted({p.element for p in programs})
    mine = [p for p in programs if elements is None or p.element in elements]
    order = InOrder(frames)
    n_out = len(set(plan.app.model_outputs.values()))
    sink = Delivery(order, frames, n_out, keep)
    # its streams' releases spread over the period, each stream with `limit` frames in flight
    admission = Admission(entry.release_every, frames, limit * entry.streams,
                          list(wakes.values()))

    def done(now: float) -> None:
        admission.completed(now)
        if elsewhere is not None:
            elsewhere()
    lock = threading.Lock()
    clock = time.perf_counter

    def complete(f: int, outs: dict, by: int) -> None:
        if n_out == 1:
            sink.deliver(f, outs, by)
            done(clock())
            return
        with lock:  # several output stages: the last of them completes the frame
            before = order.finished[f] == order.finished[f]
            sink.deliver(f, outs, by)
            if not before and order.finished[f] == order.finished[f]:
                done(clock())

    def hand_on(f: int, outs: dict, by: int) -> None:  # another process completes it
        forward(f, outs if keep(f) else {}, by)

    stream = Stream(random_source(pp.graph, seed + index), control,
                    complete if forward is None else hand_on,
                    [math.nan] * frames, FiringTimes(frames, trace), admission.arrive_at)
    workers = bind(pp, mine, frames, delivering, channels, wakes, turns=True)
    loads = any(a.kind == FIRE and a.tensors for p in mine for a in p.actions)
    delivers = forward is None and any(a.kind == DELIVER and a.tensors
                                       for p in mine for a in p.actions)
    return AppRun(index, entry, frames, stream, order, sink, admission, workers, loads,
                  delivers)


def loading_elements(entry: AppEntry) -> set[str]:
    """The elements whose workers load the application's frames from the source."""
    return {p.element for p in compile_programs(entry.plan)
            for a in p.actions if a.kind == FIRE and a.tensors}


def delivering_elements(entry: AppEntry) -> set[str]:
    """The elements whose workers deliver the application's model outputs."""
    return {p.element for p in compile_programs(entry.plan)
            for a in p.actions if a.kind == DELIVER and a.tensors}


def prewarm(pp: PreparedPlan, seed: int, only: set[str] | None = None) -> None:
    """Run one frame through every runner (those of the elements in `only`, if given) in firing
    order before the clock starts: first calls allocate and tune, and would otherwise show up
    as missed deadlines. An input another element would produce is zeros of its shape."""
    plan, graph = pp.plan, pp.graph
    tensors = dict(random_source(graph, seed)(0))
    for f in firings(plan.app):
        if only is not None and f.actor not in only:
            continue
        for t in f.inputs:
            if t not in tensors:
                info = graph.tensors[t]
                tensors[t] = np.zeros(info.shape, _NP.get(info.dtype, np.float32))
        feeds = {t: tensors[t] for t in f.inputs}
        batched = plan.mapping.batch_of(f.actor) > 1
        for lane in range(plan.mapping.lanes_of(f.actor)):
            runner = pp.runner(f.actor, f.phase, lane)
            out = runner.run_frames([feeds])[0] if batched else runner.run(feeds)
        tensors.update(out)
