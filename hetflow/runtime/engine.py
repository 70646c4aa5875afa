"""Run a plan's CSDF application as a pipelined inference engine.

One worker thread per processing element, pinned to its caller core (ONNX Runtime's pool
threads have the element's other cores); an actor replicated on k elements has k workers,
member i taking frames f with f % k == i. A GPU element with k lanes (each its own CUDA graph
and stream) keeps its one worker thread: the worker launches a lane's run and returns to the
others, so k frames are in flight on one device, each lane taking the element's next frame,
released in order like a replica group's. Each lane fires its actor's phases in
their cyclic order (Algorithm 2's order, so the application cannot deadlock), reading a phase's
inputs from bounded FIFO channels, from the frame source or from tensors an earlier phase of the
same frame left in the lane's local memory. Channel FIFOs exist per (channel, source member,
destination member) so every FIFO carries frames in increasing order; outputs are collected in
input order.

Why threads: the backends (ONNX Runtime, CUDA graph replay) release the GIL while they compute,
and a hand-off between threads passes a reference, not a copy. DESIGN.md measured 15 ORT sessions
and a CUDA-graph replay loop in one process at 98% of their separate rates.

What to fire comes from `schedule` (each actor's firings, the dispatch of frames to members
and lanes, in-order release, channel windows); faults, stalls and Ctrl-C are handled by
`harness`, as in the other engines: a worker that raises stops every other one and the run
raises RuntimeFault naming the element, stage, phase and layers; no frame for `stall_timeout`
seconds names the channel each worker waits on; Ctrl-C returns what was measured so far.
"""
from __future__ import annotations

import collections
import contextlib
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hetflow.mapping.interleaving import frames_ahead, phase_rounds
from hetflow.mapping.mapping import group_members
from hetflow.mapping.plan import Plan
from hetflow.model.graph import CnnGraph

from .harness import POLL, Control, Stopped, fault_text, frozen_heap, stop_threads, supervise
from .report import RunReport, stream_report
from .schedule import Dispatch, InOrder, channel_windows, firings, phase_sequence

RELEASE_POLL = 0.005  # how often the calling thread looks for completed frames
ARRIVAL_POLL = 0.0002  # s: how often a device's driver with a free lane looks for the
# next frame's arrival while its oldest run is still in flight


class FrameChannel:
    """A bounded channel of frame-indexed items: `put(f, x)`, `get(f)`.

    Items are taken by frame index, so any member of a replica group may produce or consume any
    frame and the consumer still sees frames in its own order. The bound is a window: frame f can
    be put only while f < (lowest frame not yet taken) + capacity. The lowest frame in flight can
    therefore always move on, which keeps the pipeline free of deadlock however frames are
    dispatched to members. A consumer waits on an event of its own frame, so a put wakes only
    the thread that wants it (many idle replicas must not all wake for every frame).
    """

    def __init__(self, name: str, capacity: int):
        self.name, self.capacity = name, max(1, capacity)
        self.items: dict[int, Any] = {}
        self.low = 0  # lowest frame not yet taken
        self.taken: set[int] = set()
        self.lock = threading.Lock()
        self.space = threading.Condition(self.lock)  # producers wait here for the window
        self.wanted: dict[int, threading.Event] = {}  # frame -> event of the waiting consumer
        # events of threads that drive several lanes: set on every put and every move of the
        # window, so such a thread waits for whichever of its lanes can go on
        self.listeners: list[threading.Event] = []

    def put(self, f: int, item: Any, control: Control, element: str, what: str) -> None:
        if self.try_put(f, item):
            return
        control.waiting[element] = what
        while not self.try_put(f, item):
            if control.stop.is_set():
                raise Stopped
            self.wait_space(f, POLL)
        control.waiting[element] = "running"

    def try_put(self, f: int, item: Any) -> bool:
        """Put frame f's item if the window has room for it (never waits)."""
        with self.lock:
            if f >= self.low + self.capacity:
                return False
            self.items[f] = item
            ev = self.wanted.pop(f, None)
        if ev is not None:
            ev.set()
        for ev in self.listeners:
            ev.set()
        return True

    def has_room(self, f: int) -> bool:
        return f < self.low + self.capacity

    def has(self, f: int) -> bool:
        return f in self.items

    def wait_space(self, f: int, timeout: float) -> bool:
        with self.lock:
            if f >= self.low + self.capacity:
                self.space.wait(timeout)
            return f < self.low + self.capacity

    def try_get(self, f: int) -> tuple[bool, Any]:
        with self.lock:
            if f not in self.items:
                return False, None
            item = self.items.pop(f)
            self.taken.add(f)
            moved = False
            while self.low in self.taken:
                self.taken.discard(self.low)
                self.low += 1
                moved = True
            if moved:
                self.space.notify_all()
                for ev in self.listeners:
                    ev.set()
            return True, item

    def wait_for(self, f: int, timeout: float) -> bool:
        with self.lock:
            if f in self.items:
                return True
            ev = self.wanted.setdefault(f, threading.Event())
        return ev.wait(timeout)

    def get(self, f: int, control: Control, element: str, what: str) -> Any:
        ok, item = self.try_get(f)
        if ok:
            return item
        control.waiting[element] = what
        while True:
            if control.stop.is_set():
                raise Stopped
            self.wait_for(f, POLL)
            ok, item = self.try_get(f)
            if ok:
                control.waiting[element] = "running"
                return item



@dataclass
class PreparedPlan:
    """Sessions built for every phase on every element; reusable across runs."""

    plan: Plan
    graph: CnnGraph
    runners: dict[tuple[str, int], Any]  # (element, phase index) -> Runner (its first lane)
    more_lanes: dict[tuple[str, int], list[Any]] = field(default_factory=dict)  # lanes 2..k

    def runner(self, element: str, phase: int, lane: int = 0) -> Any:
        return self.runners[(element, phase)] if lane == 0 else \
            self.more_lanes[(element, phase)][lane - 1]

    def close(self) -> None:
        from hetflow.backends.reuse import release

        release([*self.runners.values(), *(x for rs in self.more_lanes.values() for x in rs)])


def prepare(plan: Plan, graph: CnnGraph, progress: Callable[[str], None] | None = None,
            only: set[str] | None = None) -> PreparedPlan:
    """Sessions for every (element, phase) of `plan` (on the elements in `only`, if given)."""
    from hetflow.backends.reuse import runners_for_many

    wanted, keys = [], []
    for actor, phases in plan.app.phases.items():
        members = [el for el in group_members(actor) if only is None or el in only]
        for ph in phases if members else ():
            for el in members:
                k = plan.mapping.lanes_of(el)
                if progress:
                    progress(f"preparing {actor} phase {ph.index} on {el}"
                             + (f" ({k} lanes)" if k > 1 else ""))
                wanted.append((ph.layers, plan.elements[el], k, f"{actor}#{ph.index}"))
                keys.append((el, ph.index))
    built = runners_for_many(graph, wanted)
    runners = {key: lanes[0] for key, lanes in zip(keys, built)}
    more = {key: lanes[1:] for key, lanes in zip(keys, built)}
    return PreparedPlan(plan, graph, runners, more)



@dataclass
class RunState:
    """What a run leaves besides its report: trace events (element, actor, phase, frame, start,
    end) and when its clock started (perf_counter; frames on a clock arrive from then)."""

    events: list = field(default_factory=list)
    started: float = math.nan


def first_frame_wait(plan: Plan) -> float:
    """Seconds beyond the stall timeout that the first frame may take: an element that runs
    frames ahead finishes its first frame only after as many rounds (the predicted latency)."""
    lat = plan.predicted.get("latency") if frames_ahead(plan.mapping) else None
    return float(lat) if isinstance(lat, (int, float)) and 0 < lat < math.inf else 0.0


def run_prepared(pp: PreparedPlan, inputs: Callable[[int], dict[str, np.ndarray]], frames: int,
                 warmup: int = 0, keep_outputs: Callable[[int], bool] = lambda f: False,
                 stall_timeout: float = 30.0, trace: bool = False,
                 on_frame: Callable[[int], None] | None = None,
                 arrivals: np.ndarray | None = None) -> tuple[RunReport, dict, RunState]:
    """Stream `frames` frames through the pipeline. Returns the report, the kept outputs
    {frame: {tensor: array}} and the trace events. `arrivals`: seconds after the start at
    which each frame arrives (a camera's clock): no element takes a frame before it, and its
    latency counts from it, time spent queued included; None: every frame is there from the
    start, the stream fed as fast as the plan takes it."""
    from hetflow.backends import caller_cores_of, control_cores, pin_current_thread, pinned
    from hetflow.backends.inflight import launches

    plan, app = pp.plan, pp.plan.app
    members = {a: group_members(a) for a in app.phases}
    lanes = {el: plan.mapping.lanes_of(el) for ms in members.values() for el in ms}
    static = plan.mapping.dispatch_mode == "static"
    dispatch = {a: Dispatch(plan.mapping.pattern(a) if static else None, frames)
                for a in app.phases}
    schedule: dict[str, list] = {a: [] for a in app.phases}  # actor -> its firings, in order
    for fi in firings(app):
        schedule[fi.actor].append(fi)
    chans = {name: FrameChannel(name, w) for name, w in channel_windows(plan).items()}
    reads = {a: [t for fi in fs for t in fi.source_inputs] for a, fs in schedule.items()}
    writes = {a: [t for fi in fs for t in fi.outputs] for a, fs in schedule.items()}
    n_out = len(set(app.model_outputs.values()))
    control, state, order = Control(), RunState(), InOrder(frames)
    first_start = np.full(frames, np.nan)  # when each frame's first firing started
    busy: dict[tuple[str, int], float] = {}  # (element, lane) -> seconds computing
    done_lock = threading.Lock()
    parts: dict[int, int] = {}  # frame -> output actors that delivered it so far
    outputs: dict[int, dict[str, np.ndarray]] = {}  # kept outputs, until released
    # which element delivered each frame (the last, where several output actors do): where a
    # plan's frames came from, as the parallel baseline reports its copies'
    delivering = sorted({el for ms in members.values() for el in ms})
    delivered_by = np.full(frames, -1, np.int16)

    # absolute arrival times, set at the start; a frame enters at its arrival where frames
    # arrive on a clock, else when it is first taken
    arrive_at: np.ndarray | None = None

    def deliver(f: int, outs: dict[str, np.ndarray], by: int) -> None:
        now = time.perf_counter()
        if n_out == 1:  # one writer per frame: no lock (array and dict stores)
            if keep_outputs(f):
                outputs[f] = outs
            delivered_by[f] = by
            order.complete(f, now)
            return
        with done_lock:
            if keep_outputs(f):
                outputs.setdefault(f, {}).update(outs)
            got = parts.pop(f, 0) + 1
            if got == n_out:
                delivered_by[f] = by
                order.complete(f, now)
            else:
                parts[f] = got

    def firings_of(actor: str, j: int, lane: int, on_device: bool, me: str):
        """The firings of member j's `lane`, in order, as a generator that yields where it
        must wait: ("get", channel, frame), ("put", channel, frame) or ("device", runner,
        frame) after launching a run on a device (`on_device`: the runners take
        `submit`/`collect`). A driver resumes it once that wait is over; a failure stops
        the run naming the element, lane, stage, phase and layers."""
        el = members[actor][j]
        me_index = delivering.index(el)
        steps = [(fi, pp.runner(el, fi.phase, lane),
                  [(chans[c.name], c.tensor, f"channel {c.name} (from {c.src})") for c in fi.recv],
                  [(chans[c.name], c.tensor, f"space in channel {c.name} (to {c.dst})")
                   for c in fi.send]) for fi in schedule[actor]]
        source, delivers, stop = reads[actor], writes[actor], control.stop
        last = len(steps) - 1
        spent, fi = 0.0, None
        frame_tensors: dict[int, dict[str, np.ndarray]] = {}  # frames begun here, not ended
        try:
            for f, p in phase_sequence(dispatch[actor].frames_of(j),
                                       *phase_rounds(plan.mapping, actor, len(steps))):
                fi = None
                local = frame_tensors.get(f)
                if local is None:
                    local = frame_tensors[f] = {}
                    if source:
                        while arrive_at is not None and time.perf_counter() < arrive_at[f]:
                            yield "arrive", None, f, f"frame {f}'s arrival"
                        try:
                            x = inputs(f)
                        except BaseException as e:
                            control.fail(f"frame source, frame {f}: {type(e).__name__}: {e}")
                            return
                        local.update({t: x[t] for t in source})
                        if first_start[f] != first_start[f]:  # not yet started (NaN)
                            first_start[f] = (time.perf_counter() if arrive_at is None
                                              else arrive_at[f])
                fi, runner, recv, send = steps[p]
                for ch, t, what in recv:
                    got, item = ch.try_get(f)
                    while not got:
                        yield "get", ch, f, what
                        got, item = ch.try_get(f)
                    local[t] = item
                t0 = time.perf_counter()
                feeds = {t: local[t] for t in fi.inputs}
                if on_device:
                    runner.submit(feeds)
                    yield "device", runner, f, ""
                    out = runner.collect()
                else:
                    out = runner.run(feeds)
                t1 = time.perf_counter()
                spent += t1 - t0
                if trace:
                    state.events.append((me, actor, fi.phase, f, t0, t1))
                local.update(out)
                for ch, t, what in send:
                    while not ch.try_put(f, local[t]):
                        yield "put", ch, f, what
                if p == last:
                    del frame_tensors[f]
                    if delivers:
                        deliver(f, {t: local[t] for t in delivers}, me_index)
                    if stop.is_set():
                        return
        except GeneratorExit:  # closed by its driver: the run stopped
            raise
        except BaseException as e:  # any failure stops the whole run, naming where it happened
            where = fi.where if fi is not None else f"stage {actor}"
            control.fail(fault_text(el, f"lane {lane}, {where}" if lanes[el] > 1 else where, e))
        finally:
            busy[(el, lane)] = spent

    def copy_loop(actor: str, j: int) -> None:
        """Member j of an actor of one phase and no channels (a whole-model copy), on an
        element without launching lanes: take a frame, fire, deliver; no per-frame table of
        tensors. Its cost per frame is the driving thread's, which the other threads' compute
        waits on for the interpreter."""
        el = members[actor][j]
        me_index = delivering.index(el)
        fi = schedule[actor][0]
        runner = pp.runner(el, fi.phase)
        take, names, delivers, stop = dispatch[actor].take, fi.inputs, writes[actor], control.stop
        clock = time.perf_counter
        spent = 0.0
        try:
            pin_current_thread(caller_cores_of([runner], plan.elements[el]))
            while (f := take(j)) is not None:
                if arrive_at is not None and stop.wait(max(0.0, arrive_at[f] - clock())):
                    return
                try:
                    x = inputs(f)
                except BaseException as e:
                    control.fail(f"frame source, frame {f}: {type(e).__name__}: {e}")
                    return
                t0 = clock()
                first_start[f] = t0 if arrive_at is None else arrive_at[f]
                out = runner.run({t: x[t] for t in names})
                t1 = clock()
                spent += t1 - t0
                if trace:
                    state.events.append((el, actor, fi.phase, f, t0, t1))
                if delivers:
                    deliver(f, {t: out[t] for t in delivers}, me_index)
                if stop.is_set():
                    return
        except BaseException as e:  # any failure stops the whole run, naming where it happened
            control.fail(fault_text(el, fi.where, e))
        finally:
            busy[(el, 0)] = spent
            for lane in range(1, lanes[el]):  # lanes that cannot overlap: the first runs all
                busy[(el, lane)] = 0.0

    def copy_lanes(actor: str, j: int) -> None:
        """Member j's lanes of an actor of one phase and no channels (a whole-model copy on a
        GPU): launch a frame on every free lane, then wait for the oldest run and deliver it,
        as the parallel baseline's loop does (`backends.inflight`). The driving thread does
        nothing else a frame: where it is the GPU's bottleneck (a slow core, or the other
        threads holding the interpreter) its every microsecond is frames."""
        el = members[actor][j]
        me_index = delivering.index(el)
        fi = schedule[actor][0]
        runners = [pp.runner(el, fi.phase, lane) for lane in range(lanes[el])]
        take, names, delivers, stop = dispatch[actor].take, fi.inputs, writes[actor], control.stop
        clock = time.perf_counter
        free = collections.deque(range(len(runners)))
        in_flight: collections.deque[tuple[int, int, float]] = collections.deque()  # lane, f, t0
        spent = [0.0] * len(runners)
        lane = 0
        waiting: int | None = None  # a frame taken that has not arrived yet
        try:
            pin_current_thread(caller_cores_of(runners, plan.elements[el]))
            while True:
                while free:
                    if waiting is None and (waiting := take(j)) is None:
                        break
                    if arrive_at is not None and clock() < arrive_at[waiting]:
                        break
                    f, waiting = waiting, None
                    try:
                        x = inputs(f)
                    except BaseException as e:
                        control.fail(f"frame source, frame {f}: {type(e).__name__}: {e}")
                        return
                    lane = free.popleft()
                    t0 = clock()
                    first_start[f] = t0 if arrive_at is None else arrive_at[f]
                    runners[lane].submit({t: x[t] for t in names})
                    in_flight.append((lane, f, t0))
                if stop.is_set() or not (in_flight or waiting is not None):
                    return
                if waiting is not None and free and arrive_at is not None:
                    # a lane is free for a frame yet to arrive: whichever comes first, that
                    # frame or the oldest run's end
                    ahead = arrive_at[waiting] - clock()
                    if not in_flight:
                        stop.wait(max(0.0, ahead))
                        continue
                    if not runners[in_flight[0][0]].finished():
                        time.sleep(max(0.0, min(ahead, ARRIVAL_POLL)))
                        continue
                lane, f, t0 = in_flight.popleft()
                out = runners[lane].collect()
                free.append(lane)
                t1 = clock()
                spent[lane] += t1 - t0
                if trace:
                    state.events.append((f"{el}/lane{lane}", actor, fi.phase, f, t0, t1))
                if delivers:
                    deliver(f, {t: out[t] for t in delivers}, me_index)
        except BaseException as e:  # any failure stops the whole run, naming where it happened
            control.fail(fault_text(el, f"lane {lane}, {fi.where}", e))
        finally:
            for lane_left, _, _ in in_flight:  # a run left in flight by a stop: free the lane
                with contextlib.suppress(Exception):
                    runners[lane_left].collect()
            for i, b in enumerate(spent):
                busy[(el, i)] = b

    def over(kind: str, ch: Any, f: int) -> bool:
        """Whether a generator's wait is over: a frame in its channel, room in it, or the
        frame's arrival."""
        if kind == "get":
            return ch.has(f)
        if kind == "put":
            return ch.has_room(f)
        return time.perf_counter() >= arrive_at[f]

    def wait_once(oldest_run: Any, waits: list[tuple], me: str,
                  wake: threading.Event | None) -> None:
        """Block until a wait may be over (at most POLL for a channel, up to the next arrival
        for a frame yet to arrive), saying what the lowest frame waits on; Stopped once the run
        stops. The oldest run in flight on a device is waited for first; else, with several
        lanes, `wake` (set by the channels the lanes use on every put and take), else the one
        wait."""
        if control.stop.is_set():
            raise Stopped
        due = [arrive_at[w[2]] for w in waits if w[0] == "arrive"]
        ahead = max(0.0, min(due) - time.perf_counter()) if due else POLL
        if oldest_run is not None:
            if not due:
                oldest_run.wait()
            elif not oldest_run.finished():  # whichever comes first: the run's end or a frame
                time.sleep(min(ahead, ARRIVAL_POLL))
            return
        kind, ch, f, what = min(waits, key=lambda w: w[2])
        control.waiting[me] = what
        limit = min(POLL, ahead)
        if wake is not None:
            wake.wait(limit)
        elif kind == "arrive":
            control.stop.wait(limit)
        elif kind == "get":
            ch.wait_for(f, POLL)
        else:
            ch.wait_space(f, POLL)

    def drive(actor: str, j: int) -> None:
        """Member j's worker thread. Its lanes (k > 1: a GPU's runners, each its own stream)
        are driven by this one thread, up to k runs in flight: it resumes whichever lane's
        wait is over and, when none is, waits on the oldest run in flight, else on a channel.
        One thread per GPU measured steadier and faster than a thread per lane on the H100
        machine (several sleeping threads on one driving core wake late by turns). Runs are
        looked at in launch order, stopping at the first not finished, as
        `backends.inflight` collects them: asking each lane's run at every step cost the
        driving thread tens of microseconds a frame at 16-24 lanes."""
        el = members[actor][j]
        element = plan.elements[el]
        k = lanes[el]
        # lanes overlap where the runners launch runs without waiting for them (a GPU's)
        on_device = k > 1 and launches(pp.runner(el, fi.phase, lane)
                                       for fi in schedule[actor] for lane in range(k))
        if len(schedule[actor]) == 1 and not schedule[actor][0].recv \
                and not schedule[actor][0].send:
            return copy_lanes(actor, j) if on_device else copy_loop(actor, j)
        gens = [firings_of(actor, j, lane, on_device, f"{el}/lane{lane}" if k > 1 else el)
                for lane in range(k)]
        wake = wakes.get((actor, j))
        in_flight: collections.deque[tuple[int, Any]] = collections.deque()  # (lane, runner)
        waits: dict[int, tuple] = {}  # lane -> the channel it waits on

        def resume(i: int) -> None:
            w = next(gens[i], None)
            if w is None:
                return
            if w[0] == "device":  # launched: its runs are looked at in launch order
                in_flight.append((i, w[1]))
            else:
                waits[i] = w

        try:
            pin_current_thread(caller_cores_of(
                (pp.runner(el, fi.phase, lane) for fi in schedule[actor] for lane in range(k)),
                element))
            for i in range(k):
                resume(i)
            while in_flight or waits:
                moved = False
                if wake is not None:
                    wake.clear()  # before looking: a change after this sets it again
                while in_flight and in_flight[0][1].finished():
                    moved = True
                    control.waiting[el] = "running"  # before the firing: it may hang
                    resume(in_flight.popleft()[0])
                for i, (kind, ch, f, _) in list(waits.items()) if waits else ():
                    if over(kind, ch, f):
                        moved = True
                        control.waiting[el] = "running"
                        del waits[i]
                        resume(i)
                if not moved:
                    wait_once(in_flight[0][1] if in_flight else None, list(waits.values()),
                              el, wake)
        except Stopped:
            return
        except BaseException as e:  # noqa: BLE001 - a failure outside any firing
            control.fail(fault_text(el, f"stage {actor}", e))
        finally:
            for _, runner in in_flight:  # a run left in flight by a stop: free the lane again
                with contextlib.suppress(Exception):
                    runner.collect()
            for g in gens:
                g.close()

    wakes: dict[tuple[str, int], threading.Event] = {}  # a laned member's, on its channels
    for a, ms in members.items():
        used = {c.name for fi in schedule[a] for c in (*fi.recv, *fi.send)}
        for j, m in enumerate(ms):
            if lanes[m] > 1 and used:
                wakes[(a, j)] = wake = threading.Event()
                for name in used:
                    chans[name].listeners.append(wake)
    threads = [threading.Thread(target=drive, args=(a, j), name=f"hetflow-{m}", daemon=True)
               for a, ms in members.items() for j, m in enumerate(ms)]
    kept: dict[int, dict[str, np.ndarray]] = {}

    def release() -> int | None:
        start, stop = order.release(frames)
        if outputs:
            for f in sorted(f for f in list(outputs) if f < stop):  # kept in frame order
                kept[f] = outputs.pop(f)
        if on_frame:
            for f in range(start, stop):
                try:
                    on_frame(f)
                except BaseException:  # (Ctrl-C) the frames after f were not handed on
                    order.next = f + 1
                    raise
        if order.next >= frames:
            return None
        # a pass costs the same for one frame or many: pass by pass at the workers' pace, it
        # would hold the interpreter lock they need (release times are completion times)
        time.sleep(RELEASE_POLL)
        return order.next

    # this thread only releases frames and watches: off the cores of the stages
    with frozen_heap(), pinned(control_cores(plan.elements.values())):
        # after the heap is frozen (a full collection first)
        t_start = state.started = time.perf_counter()
        patience = stall_timeout + first_frame_wait(plan)
        if arrivals is not None:
            arrive_at = t_start + np.asarray(arrivals, dtype=float)
            # frames that come on a clock: a frame held back for later ones waits for them
            patience += float(np.max(np.diff(arrivals), initial=0.0)) * (
                frames_ahead(plan.mapping) + 1)
        try:  # (a Ctrl-C while they start stops those started)
            for t in threads:
                t.start()
            complete = supervise(release, control, patience)
        finally:
            stop_threads(control, threads)
    control.raise_fault()
    per_el: dict[str, float] = {}
    for (el, _), b in busy.items():
        per_el[el] = per_el.get(el, 0.0) + b / lanes[el]
    n = order.next
    done_at = order.released_at[:n]
    entered = np.where(np.isnan(first_start[:n]), done_at, first_start[:n])
    report = stream_report(done_at.tolist(), (done_at - entered).tolist(), warmup, per_el,
                           t_start, complete, plan.predicted, frames_ahead(plan.mapping),
                           order.completed_at.tolist(),
                           float(entered.max()) if complete and n else None)
    # the steady rate split by each element's share of the frames after the warm-up
    by = delivered_by[report.warmup:n]
    counted = np.bincount(by[by >= 0], minlength=len(delivering))
    if counted.sum() and report.throughput == report.throughput:
        report.notes["per_element_fps"] = {
            el: float(report.throughput * c / counted.sum())
            for el, c in zip(delivering, counted) if c}
    return report, kept, state
