"""Run a plan's CSDF application as a pipelined inference engine.

One worker thread per processing element, pinned to its caller core (ONNX Runtime's pool
threads have the element's other cores); an actor replicated on k elements has k workers,
member i taking frames f with f % k == i. A GPU element with k lanes has k workers too, one per
lane (its own CUDA graph and stream), each taking the element's next frame: k frames in flight
on one device, released in order like a replica group's. Each worker fires its actor's phases in
their cyclic order (Algorithm 2's order, so the application cannot deadlock), reading a phase's
inputs from bounded FIFO channels, from the frame source or from tensors an earlier phase of the
same frame left in the worker's local memory. Channel FIFOs exist per (channel, source member,
destination member) so every FIFO carries frames in increasing order; outputs are collected in
input order.

Why threads: the backends (ONNX Runtime, CUDA graph replay) release the GIL while they compute,
and a hand-off between threads passes a reference, not a copy. DESIGN.md measured 15 ORT sessions
and a CUDA-graph replay loop in one process at 98% of their separate rates.

Faults: a worker that raises stops every other worker (all blocking waits poll a stop event every
50 ms) and the run raises RuntimeFault naming the element, stage, phase and layers. A watchdog
raises RuntimeFault naming the channel each worker waits on when no frame completes for
`stall_timeout` seconds. Ctrl-C stops the workers and returns what was measured so far.
"""
from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hetflow.errors import RuntimeFault
from hetflow.mapping.mapping import group_members
from hetflow.mapping.plan import Plan
from hetflow.model.graph import CnnGraph

from .report import RunReport, latency_stats, steady_throughput

POLL = 0.05
RELEASE_POLL = 0.005  # how often the calling thread looks for completed frames


class _Stopped(Exception):
    pass


@contextlib.contextmanager
def frozen_heap(switch_interval: float | None = None):
    """Keep what exists before a run (models, sessions, graphs: millions of objects) out of the
    garbage collector's scans while it runs: a full collection over them holds the GIL for
    milliseconds and shows up as a latency spike in every worker. `switch_interval` (or
    HETFLOW_SWITCH_INTERVAL, seconds): how long a thread that wants the GIL waits before the
    holder is asked to drop it; Python's 5 ms default lets one busy thread stall a worker
    whose frame is due (docs/results/multi_app.md measured 0.1 ms against it)."""
    gc.collect()
    gc.freeze()
    before = sys.getswitchinterval()
    interval = switch_interval or float(os.environ.get("HETFLOW_SWITCH_INTERVAL") or 0)
    if interval > 0:
        sys.setswitchinterval(interval)
    try:
        yield
    finally:
        sys.setswitchinterval(before)
        gc.unfreeze()


@dataclass
class _Fault:
    message: str


@dataclass
class _Shared:
    stop: threading.Event = field(default_factory=threading.Event)
    fault: list[_Fault] = field(default_factory=list)
    first_start: dict[int, float] = field(default_factory=dict)  # frame -> first phase start
    events: list = field(default_factory=list)  # trace events
    busy: dict[str, float] = field(default_factory=dict)  # element -> seconds computing
    waiting: dict[str, str] = field(default_factory=dict)  # element -> what it waits on now


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

    def put(self, f: int, item: Any, shared: "_Shared", element: str, what: str) -> None:
        with self.lock:
            if f >= self.low + self.capacity:
                shared.waiting[element] = what
                while f >= self.low + self.capacity:
                    if shared.stop.is_set():
                        raise _Stopped
                    self.space.wait(POLL)
                shared.waiting[element] = "running"
            self.items[f] = item
            ev = self.wanted.pop(f, None)
        if ev is not None:
            ev.set()

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
            return True, item

    def wait_for(self, f: int, timeout: float) -> bool:
        with self.lock:
            if f in self.items:
                return True
            ev = self.wanted.setdefault(f, threading.Event())
        return ev.wait(timeout)

    def get(self, f: int, shared: "_Shared", element: str, what: str) -> Any:
        ok, item = self.try_get(f)
        if ok:
            return item
        shared.waiting[element] = what
        while True:
            if shared.stop.is_set():
                raise _Stopped
            self.wait_for(f, POLL)
            ok, item = self.try_get(f)
            if ok:
                shared.waiting[element] = "running"
                return item


class _Dispatch:
    """Which frames a member of an actor takes: by the actor's static pattern, or dynamically
    (the next frame goes to whichever member asks first: idle members never wait on busy ones,
    so members of different or varying speed all stay busy). The lanes of one member share
    its frames, each lane taking the member's next one."""

    def __init__(self, pattern: list[int] | None, frames: int):
        self.pattern, self.frames = pattern, frames
        self.next = 0
        self.lock = threading.Lock()
        self._static: dict[int, Any] = {}  # member -> iterator over its frames

    def _frames_of(self, j: int):
        mine = [off for off, m in enumerate(self.pattern) if m == j]
        for base in range(0, self.frames, len(self.pattern)):
            for off in mine:
                if base + off < self.frames:
                    yield base + off

    def take(self, j: int) -> int | None:
        """Member j's next frame, or None when it has none left."""
        with self.lock:
            if self.pattern:
                return next(self._static.setdefault(j, self._frames_of(j)), None)
            f = self.next
            self.next += 1
        return f if f < self.frames else None

    def frames_of(self, j: int):
        while (f := self.take(j)) is not None:
            yield f


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
        for r in [*self.runners.values(), *(x for rs in self.more_lanes.values() for x in rs)]:
            close = getattr(r, "close", None)
            if close:
                close()


def prepare(plan: Plan, graph: CnnGraph, progress: Callable[[str], None] | None = None,
            only: set[str] | None = None) -> PreparedPlan:
    """Sessions for every (element, phase) of `plan` (on the elements in `only`, if given)."""
    from hetflow.backends import backend_for
    from hetflow.model.subnet import extract_subnet

    runners, more = {}, {}
    pp = PreparedPlan(plan, graph, runners, more)
    try:
        for actor, phases in plan.app.phases.items():
            members = [el for el in group_members(actor) if only is None or el in only]
            for ph in phases if members else ():
                sub = extract_subnet(graph, ph.layers, name=f"{actor}#{ph.index}")
                for el in members:
                    element = plan.elements[el]
                    k = plan.mapping.lanes_of(el)
                    if progress:
                        progress(f"preparing {actor} phase {ph.index} on {el}"
                                 + (f" ({k} lanes)" if k > 1 else ""))
                    backend = backend_for(element)
                    lanes = (backend.prepare_lanes(sub, element, k) if k > 1
                             else [backend.prepare(sub, element)])
                    runners[(el, ph.index)], more[(el, ph.index)] = lanes[0], lanes[1:]
    except BaseException:
        pp.close()
        raise
    return pp


def run_prepared(pp: PreparedPlan, inputs: Callable[[int], dict[str, np.ndarray]], frames: int,
                 warmup: int = 0, keep_outputs: Callable[[int], bool] = lambda f: False,
                 stall_timeout: float = 30.0, trace: bool = False,
                 on_frame: Callable[[int], None] | None = None) -> tuple[RunReport, dict, _Shared]:
    """Stream `frames` frames through the pipeline. Returns the report, the kept outputs
    {frame: {tensor: array}} and the raw shared state (trace events)."""
    from hetflow.backends import caller_cores_of, control_cores, pin_current_thread, pinned

    plan, app = pp.plan, pp.plan.app
    control = control_cores(plan.elements.values())
    cap = max(1, plan.capacity_frames)
    members = {a: group_members(a) for a in app.phases}
    lanes = {el: plan.mapping.lanes_of(el) for ms in members.values() for el in ms}
    static = plan.mapping.dispatch_mode == "static"
    dispatch = {a: _Dispatch(plan.mapping.pattern(a) if static else None, frames)
                for a in app.phases}

    def window(*actors: str) -> int:
        # room for `cap` frames per pattern slot or worker: while a slow member works on one
        # frame, the fast ones complete the rest of a pattern period, and outputs leave in
        # order, so a smaller window would stall the fast members behind the slow one
        return cap * max(max(len(plan.mapping.pattern(a)), sum(lanes[e] for e in members[a]))
                         for a in actors)

    shared = _Shared()
    chans = {c.name: FrameChannel(c.name, window(c.src, c.dst)) for c in app.channels}
    reads = {a: [t for t, rs in app.model_inputs.items() if a in rs] for a in app.phases}
    writes = {a: [t for t, w in app.model_outputs.items() if w == a] for a in app.phases}
    n_out = len(set(app.model_outputs.values()))
    # frames leave in order: frame f is released once it and every frame before it completed,
    # at the latest of their completion times. The workers record completions; the calling
    # thread releases (no collector or feeder thread: at thousands of frames per second their
    # hand-offs cost as much as a stage)
    done_lock = threading.Lock()
    parts: dict[int, int] = {}  # frame -> output actors that delivered it so far
    finished: dict[int, float] = {}  # frame -> when its last output was produced
    outputs: dict[int, dict[str, np.ndarray]] = {}  # kept outputs
    # what each phase receives from channels / sends
    recv = {(a, p.index): [c for c in app.channels if c.dst == a and c.dst_phase == p.index]
            for a, ps in app.phases.items() for p in ps}
    send = {(a, p.index): [c for c in app.channels if c.src == a and c.src_phase == p.index]
            for a, ps in app.phases.items() for p in ps}

    def deliver(f: int, outs: dict[str, np.ndarray]) -> None:
        now = time.perf_counter()
        with done_lock:
            if keep_outputs(f):
                outputs.setdefault(f, {}).update(outs)
            got = parts.pop(f, 0) + 1
            if got == n_out:
                finished[f] = now
            else:
                parts[f] = got

    def worker(actor: str, j: int, lane: int) -> None:
        el = members[actor][j]
        element = plan.elements[el]
        phases = app.phases[actor]
        runner = {p.index: pp.runner(el, p.index, lane) for p in phases}
        track = f"{el}/lane{lane}" if lanes[el] > 1 else el
        ph = None
        try:
            pin_current_thread(caller_cores_of(runner.values(), element))
            shared.busy.setdefault(el, 0.0)
            for f in dispatch[actor].frames_of(j):
                ph = None
                local: dict[str, np.ndarray] = {}
                if reads[actor]:
                    try:
                        x = inputs(f)
                        local.update({t: x[t] for t in reads[actor]})
                    except BaseException as e:
                        shared.fault.append(_Fault(f"frame source, frame {f}: "
                                                   f"{type(e).__name__}: {e}"))
                        shared.stop.set()
                        return
                for ph in phases:
                    for c in recv[(actor, ph.index)]:
                        local[c.tensor] = chans[c.name].get(f, shared, el,
                                                            f"channel {c.name} (from {c.src})")
                    feeds = {t: local[t] for t in ph.inputs}
                    t0 = time.perf_counter()
                    shared.first_start.setdefault(f, t0)
                    out = runner[ph.index].run(feeds)
                    t1 = time.perf_counter()
                    shared.busy[el] += (t1 - t0) / lanes[el]
                    if trace:
                        shared.events.append((track, actor, ph.index, f, t0, t1))
                    local.update(out)
                    for c in send[(actor, ph.index)]:
                        chans[c.name].put(f, local[c.tensor], shared, el,
                                          f"space in channel {c.name} (to {c.dst})")
                if writes[actor]:
                    deliver(f, {t: local[t] for t in writes[actor]})
                if shared.stop.is_set():
                    return
        except _Stopped:
            return
        except BaseException as e:  # any failure stops the whole run, naming where it happened
            where = (f"stage {actor} phase {ph.index} (layers {ph.layers[0]}..{ph.layers[-1]})"
                     if ph is not None else f"stage {actor}")
            if lanes[el] > 1:
                where = f"lane {lane}, {where}"
            shared.fault.append(_Fault(f"element {el}, {where}: {type(e).__name__}: "
                                       f"{str(e).splitlines()[0] if str(e) else ''}"))
            shared.stop.set()

    threads = [threading.Thread(target=worker, args=(a, j, lane), name=f"hetflow-{m}-{lane}",
                                daemon=True)
               for a, ms in members.items() for j, m in enumerate(ms) for lane in range(lanes[m])]
    done_at: list[float] = []
    latencies: list[float] = []
    kept: dict[int, dict[str, np.ndarray]] = {}
    complete = True
    t_start = time.perf_counter()
    stack = contextlib.ExitStack()
    stack.enter_context(frozen_heap())
    stack.enter_context(pinned(control))  # this thread only releases frames and watches
    for t in threads:
        t.start()
    try:
        last, released = time.perf_counter(), 0
        while released < frames:
            with done_lock:
                ready = []
                while released + len(ready) < frames and released + len(ready) in finished:
                    f = released + len(ready)
                    ready.append((f, finished.pop(f), outputs.pop(f, None)))
            for f, at, result in ready:
                at = max(at, done_at[-1]) if done_at else at
                done_at.append(at)
                latencies.append(at - shared.first_start.get(f, at))
                if result is not None:
                    kept[f] = result
                released = f + 1
                if on_frame:
                    on_frame(f)
            now = time.perf_counter()
            if ready:
                last = now
                continue
            if shared.fault:
                raise RuntimeFault(shared.fault[0].message)
            if now - last > stall_timeout:
                waits = "; ".join(f"{el} waits on {w}" for el, w in
                                  sorted(shared.waiting.items()) if w != "running")
                raise RuntimeFault(f"stall: no frame completed for {stall_timeout:.0f}"
                                   f" s at frame {released}; {waits or 'every element runs'}")
            time.sleep(RELEASE_POLL)
    except KeyboardInterrupt:
        complete = False
    finally:
        shared.stop.set()
        for t in threads:
            t.join(timeout=2.0)
        stack.close()
    if shared.fault:
        raise RuntimeFault(shared.fault[0].message)
    n = len(done_at)
    thr, window, w = steady_throughput(done_at, warmup)
    util = {el: min(1.0, b / (done_at[-1] - t_start)) for el, b in shared.busy.items()} if n else {}
    report = RunReport("plan", n, w, thr, latency_stats(latencies[w:]), util,
                       dict(plan.predicted), complete=complete,
                       notes={"wall_s": (done_at[-1] - t_start) if n else 0.0, "window_s": window})
    return report, kept, shared
