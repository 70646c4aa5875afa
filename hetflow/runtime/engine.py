"""Run a plan's CSDF application as a pipelined inference engine.

One worker thread per processing element, pinned to its caller core (ONNX Runtime's pool
threads have the element's other cores); an actor replicated on k elements has k workers,
frames dispatched to them by the actor's static pattern or to whichever asks first. A GPU
element with k lanes (each its own CUDA graph and stream) keeps its one worker thread, which
launches a lane's run and returns to the others, so k frames are in flight on one device.
Each worker runs the actions compiled from the plan (`runtime.program`: receive, fire, send,
deliver, in Algorithm 2's cyclic phase order, frame by frame or interleaved) through the one
firing loop (`runtime.loop`), reading a phase's inputs from bounded FIFO channels
(`runtime.channel`), from the frame source or from tensors an earlier phase of the same frame
left in the worker's memory. Outputs are released in input order.

Why threads: the backends (ONNX Runtime, CUDA graph replay) release the GIL while they compute,
and a hand-off between threads passes a reference, not a copy. DESIGN.md measured 15 ORT sessions
and a CUDA-graph replay loop in one process at 98% of their separate rates.

Faults, stalls and Ctrl-C are handled by `harness`, as in the other engines: a worker that
raises stops every other one and the run raises RuntimeFault naming the element, lane, stage,
phase and layers; no frame for `stall_timeout` seconds names the channel each worker waits on;
Ctrl-C returns what was measured so far.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hetflow.plan.orders import frames_ahead
from hetflow.plan.mapping import group_members
from hetflow.plan.plan import Plan
from hetflow.model.graph import CnnGraph

from hetflow.runtime.channel import Channel, FrameChannel
from hetflow.runtime.harness import Control, frozen_heap, stop_threads, supervise
from hetflow.runtime.loop import Stream, Worker, drive
from hetflow.plan.program import Program, compile_programs
from hetflow.runtime.report import RunReport, stream_report
from hetflow.plan.schedule import Dispatch, InOrder, channel_windows, firings
from hetflow.backends import caller_cores_of, control_cores, pinned
from hetflow.backends.inflight import launches
from hetflow.backends.reuse import release, runners_for, runners_for_many

__all__ = ["FrameChannel", "PreparedPlan", "RunState", "prepare", "run_prepared"]

RELEASE_POLL = 0.005  # how often the calling thread looks for completed frames


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

    @property
    def every_runner(self) -> list[Any]:
        """Every lane's runner of every (element, phase)."""
        return [*self.runners.values(), *(x for rs in self.more_lanes.values() for x in rs)]

    def close(self) -> None:

        release(self.every_runner)


def prepare(plan: Plan, graph: CnnGraph, progress: Callable[[str], None] | None = None,
            only: set[str] | None = None) -> PreparedPlan:
    """Sessions for every (element, phase) of `plan` (on the elements in `only`, if given)."""

    wanted, batched = [], []
    for actor, phases in plan.app.phases.items():
        members = [el for el in group_members(actor) if only is None or el in only]
        for ph in phases if members else ():
            for el in members:
                k, b = plan.mapping.lanes_of(el), plan.mapping.batch_of(el)
                if progress:
                    progress(f"preparing {actor} phase {ph.index} on {el}"
                             + (f" ({k} lanes)" if k > 1 else "")
                             + (f" (batch {b})" if b > 1 else ""))
                item = (ph.layers, plan.elements[el], k, f"{actor}#{ph.index}")
                (batched if b > 1 else wanted).append((item, b, (el, ph.index)))
    keys = [key for _, _, key in wanted + batched]
    built = runners_for_many(graph, [item for item, _, _ in wanted])
    try:  # a batched runner gathers b frames into one run (its graph captured for b)
        for (layers, element, k, name), b, _ in batched:
            built.append(runners_for(graph, layers, element, lanes=k, name=name, batch=b))
    except BaseException:
        release([x for lanes in built for x in lanes])
        raise
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


class Delivery:
    """Where the workers hand their frames' model outputs: a frame completes once every output
    actor delivered it; its outputs are kept where `keep(f)`; which element delivered it (the
    last, where several output actors do) is counted, as the parallel baseline reports its
    copies'."""

    def __init__(self, order: InOrder, frames: int, output_actors: int,
                 keep: Callable[[int], bool]):
        self.order, self.keep, self.n_out = order, keep, output_actors
        self.outputs: dict[int, dict[str, np.ndarray]] = {}  # kept outputs, until released
        self.parts: dict[int, int] = {}  # frame -> output actors that delivered it so far
        self.by = np.full(frames, -1, np.int16)
        self.lock = threading.Lock()

    def deliver(self, f: int, outs: dict[str, np.ndarray], by: int) -> None:
        now = time.perf_counter()
        if self.n_out == 1:  # one writer per frame: no lock (array and dict stores)
            if self.keep(f):
                self.outputs[f] = outs
            self.by[f] = by
            self.order.complete(f, now)
            return
        self._deliver_part(f, outs, by, now)

    def deliver_frames(self, fs: list[int], outs: list[dict[str, np.ndarray]], by: int) -> None:
        """`deliver` for a batch's frames, which complete together."""
        now = time.perf_counter()
        if self.n_out == 1:
            for f, o in zip(fs, outs):
                if self.keep(f):
                    self.outputs[f] = o
            self.by[fs] = by
            self.order.complete_frames(fs, now)
            return
        for f, o in zip(fs, outs):
            self._deliver_part(f, o, by, now)

    def _deliver_part(self, f: int, outs: dict[str, np.ndarray], by: int, now: float) -> None:
        """Frame f's outputs of one of several output actors."""
        with self.lock:
            if self.keep(f):
                self.outputs.setdefault(f, {}).update(outs)
            got = self.parts.pop(f, 0) + 1
            if got == self.n_out:
                self.by[f] = by
                self.order.complete(f, now)
            else:
                self.parts[f] = got


def batch_windows(plan: Plan) -> dict[str, int]:
    """Each channel's window (`channel_windows`), widened by the frames batches hold beyond one
    a worker: a batched worker's lanes take up to lanes x b frames before they fire, and every
    channel must let as many pass, those into it and those on paths beside it (a skip
    connection around a batched stage) alike, or its producer stalls the batch it feeds."""
    m = plan.mapping
    held = sum(max(0, (m.batch_of(e) - 1) * m.lanes_of(e))
               for a in plan.app.phases for e in group_members(a))
    return {name: w + held for name, w in channel_windows(plan).items()}


def bind(pp: PreparedPlan, programs: list[Program], frames: int, delivering: list[str],
         channels: dict[str, Channel] | None = None,
         wakes: dict[str, threading.Event] | None = None, turns: bool = False) -> list[Worker]:
    """Each program with its element's runners, the run's channels and its group's dispatch;
    laned workers listen on the channels they use. Several applications at once
    (`multi.runtime`) bind each application's programs with `channels` of their own kind (one
    `FrameChannel` per channel of the plan, by default), the `wakes` of the elements' shared
    drivers (every worker listens on its element's) and `turns` (a firing waits for its turn)."""

    plan = pp.plan
    steps: dict[str, dict[int, Any]] = {}
    for fi in firings(plan.app):
        steps.setdefault(fi.actor, {})[fi.phase] = fi
    chans = channels if channels is not None else {
        name: FrameChannel(name, w) for name, w in batch_windows(plan).items()}
    # one per actor: its members share it; a batched member takes blocks of frames
    batched = {p.actor for p in programs if p.batch > 1}
    dispatch = {p.actor: Dispatch(list(p.pattern) if p.pattern else None, frames,
                                  blocks=p.actor in batched) for p in programs}
    workers = []
    for prog in programs:
        el, phases = prog.element, steps[prog.actor]
        runners = [{ph: pp.runner(el, ph, lane) for ph in phases} for lane in range(prog.lanes)]
        every = [r for rs in runners for r in rs.values()]
        # lanes overlap where the runners launch runs without waiting for them (a GPU's); a
        # driver shared by several applications launches even one lane's runs, so that it
        # serves the others while the device runs it
        on_device = (prog.lanes > 1 or turns) and launches(every)
        used = {a.channel for a in prog.actions if a.channel}
        if wakes is not None:
            wake = wakes[el]
        else:
            wake = threading.Event() if prog.lanes > 1 and used else None
        for name in used if wake else ():
            chans[name].listen(wake)
        workers.append(Worker(prog, caller_cores_of(every, plan.elements[el]), phases, runners,
                              chans, dispatch[prog.actor].take, delivering.index(el),
                              on_device, wake, dispatch[prog.actor].take_block, turns))
    return workers


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

    plan = pp.plan
    programs = compile_programs(plan)
    delivering = sorted({p.element for p in programs})
    control, state, order = Control(), RunState(), InOrder(frames)
    sink = Delivery(order, frames, len(set(plan.app.model_outputs.values())), keep_outputs)
    stream = Stream(inputs, control, sink.deliver, [math.nan] * frames,
                    state.events if trace else None, deliver_frames=sink.deliver_frames)
    threads = [threading.Thread(target=drive, args=(stream, w), daemon=True,
                                name=f"hetflow-{w.program.element}")
               for w in bind(pp, programs, frames, delivering)]
    kept: dict[int, dict[str, np.ndarray]] = {}

    def release() -> int | None:
        start, stop = order.release(frames)
        if sink.outputs:
            for f in sorted(f for f in list(sink.outputs) if f < stop):  # kept in frame order
                kept[f] = sink.outputs.pop(f)
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
            stream.arrive_at = t_start + np.asarray(arrivals, dtype=float)
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
    report = summary(plan, order, stream, sink.by, delivering, warmup, t_start, complete)
    return report, kept, state


def summary(plan: Plan, order: InOrder, stream: Stream, delivered_by: np.ndarray,
            delivering: list[str], warmup: int, t_start: float, complete: bool) -> RunReport:
    """The run's report: released frames' latencies from their entry, each element's busy
    share, and the steady rate split by each element's share of the frames after the warm-up."""
    per_el: dict[str, float] = {}
    for (el, _), b in stream.busy.items():
        per_el[el] = per_el.get(el, 0.0) + b / plan.mapping.lanes_of(el)
    n = order.next
    done_at = order.released_at[:n]
    first = np.array(stream.first_start[:n], dtype=float)
    entered = np.where(np.isnan(first), done_at, first)
    report = stream_report(done_at.tolist(), (done_at - entered).tolist(), warmup, per_el,
                           t_start, complete, plan.predicted, frames_ahead(plan.mapping),
                           order.completed_at.tolist(),
                           float(entered.max()) if complete and n else None)
    by = delivered_by[report.warmup:n]
    counted = np.bincount(by[by >= 0], minlength=len(delivering))
    if counted.sum() and report.throughput == report.throughput:
        report.notes["per_element_fps"] = {
            el: float(report.throughput * c / counted.sum())
            for el, c in zip(delivering, counted) if c}
    return report
