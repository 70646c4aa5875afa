"""Run a plan's CSDF application as a pipelined inference engine.

One worker thread per processing element, pinned to its cores; an actor replicated on k elements
has k workers, member i taking frames f with f % k == i. Each worker fires its actor's phases in
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

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hetflow.errors import RuntimeFault
from hetflow.mapping.mapping import group_members
from hetflow.mapping.plan import Plan
from hetflow.model.graph import CnnGraph

from .report import RunReport, latency_stats

POLL = 0.05


class _Stopped(Exception):
    pass


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


def _get(q: queue.Queue, shared: _Shared, element: str, what: str):
    shared.waiting[element] = what
    while True:
        try:
            item = q.get(timeout=POLL)
            shared.waiting[element] = "running"
            return item
        except queue.Empty:
            if shared.stop.is_set():
                raise _Stopped


def _put(q: queue.Queue, item, shared: _Shared, element: str, what: str) -> None:
    shared.waiting[element] = what
    while True:
        try:
            q.put(item, timeout=POLL)
            shared.waiting[element] = "running"
            return
        except queue.Full:
            if shared.stop.is_set():
                raise _Stopped


@dataclass
class PreparedPlan:
    """Sessions built for every phase on every element; reusable across runs."""

    plan: Plan
    graph: CnnGraph
    runners: dict[tuple[str, int], Any]  # (element, phase index) -> Runner

    def close(self) -> None:
        for r in self.runners.values():
            close = getattr(r, "close", None)
            if close:
                close()


def prepare(plan: Plan, graph: CnnGraph, progress: Callable[[str], None] | None = None
            ) -> PreparedPlan:
    from hetflow.backends import backend_for
    from hetflow.model.subnet import extract_subnet

    runners = {}
    for actor, phases in plan.app.phases.items():
        for ph in phases:
            sub = extract_subnet(graph, ph.layers, name=f"{actor}#{ph.index}")
            for el in group_members(actor):
                element = plan.elements[el]
                if progress:
                    progress(f"preparing {actor} phase {ph.index} on {el}")
                runners[(el, ph.index)] = backend_for(element).prepare(sub, element)
    return PreparedPlan(plan, graph, runners)


def run_prepared(pp: PreparedPlan, inputs: Callable[[int], dict[str, np.ndarray]], frames: int,
                 warmup: int = 0, keep_outputs: Callable[[int], bool] = lambda f: False,
                 stall_timeout: float = 30.0, trace: bool = False,
                 on_frame: Callable[[int], None] | None = None) -> tuple[RunReport, dict, _Shared]:
    """Stream `frames` frames through the pipeline. Returns the report, the kept outputs
    {frame: {tensor: array}} and the raw shared state (trace events)."""
    from hetflow.backends import pin_current_thread

    plan, app = pp.plan, pp.plan.app
    cap = max(1, plan.capacity_frames)
    members = {a: group_members(a) for a in app.phases}
    patterns = {a: plan.mapping.pattern(a) for a in app.phases}

    def member(actor: str, f: int) -> int:
        p = patterns[actor]
        return p[f % len(p)]

    def fifo(i_actor: str | None, i: int, j_actor: str | None, j: int) -> queue.Queue:
        # A FIFO between two members carries the frames both take; over one period of the two
        # patterns it must hold all of them, or a slow member's frame in the collector's way
        # (outputs leave in order) would block a fast member (head-of-line blocking).
        pi = patterns[i_actor] if i_actor else [0]
        pj = patterns[j_actor] if j_actor else [0]
        period = len(pi) * len(pj)
        shared_frames = sum(1 for f in range(period) if pi[f % len(pi)] == i and pj[f % len(pj)] == j)
        share = shared_frames * max(len(pi), len(pj)) // period if period else 1
        return queue.Queue(cap * max(1, share))

    shared = _Shared()
    # FIFOs: (channel name, src member idx, dst member idx)
    fifos: dict[tuple[str, int, int], queue.Queue] = {}
    for c in app.channels:
        for i in range(len(members[c.src])):
            for j in range(len(members[c.dst])):
                fifos[(c.name, i, j)] = fifo(c.src, i, c.dst, j)
    in_q = {(a, j): fifo(None, 0, a, j) for a in app.phases for j in range(len(members[a]))
            if any(a in readers for readers in app.model_inputs.values())}
    out_q = {(a, j): fifo(a, j, None, 0) for a in set(app.model_outputs.values())
             for j in range(len(members[a]))}
    # what each phase receives from channels / sends
    recv = {(a, p.index): [c for c in app.channels if c.dst == a and c.dst_phase == p.index]
            for a, ps in app.phases.items() for p in ps}
    send = {(a, p.index): [c for c in app.channels if c.src == a and c.src_phase == p.index]
            for a, ps in app.phases.items() for p in ps}
    model_inputs = set(app.model_inputs)

    def worker(actor: str, j: int) -> None:
        el = members[actor][j]
        element = plan.elements[el]
        period = patterns[actor]
        mine = [off for off, m in enumerate(period) if m == j]
        phases = app.phases[actor]
        ph = None
        try:
            pin_current_thread(element.cores)
            shared.busy[el] = 0.0
            for f in (base + off for base in range(0, frames, len(period)) for off in mine):
                if f >= frames:
                    break
                local: dict[str, np.ndarray] = {}
                if (actor, j) in in_q:
                    local.update(_get(in_q[(actor, j)], shared, el, "the frame source"))
                for ph in phases:
                    for c in recv[(actor, ph.index)]:
                        i = member(c.src, f)
                        local[c.tensor] = _get(fifos[(c.name, i, j)], shared, el,
                                               f"channel {c.name} (from {members[c.src][i]})")
                    feeds = {t: local[t] for t in ph.inputs}
                    t0 = time.perf_counter()
                    shared.first_start.setdefault(f, t0)
                    out = pp.runners[(el, ph.index)].run(feeds)
                    t1 = time.perf_counter()
                    shared.busy[el] += t1 - t0
                    if trace:
                        shared.events.append((el, actor, ph.index, f, t0, t1))
                    local.update(out)
                    for c in send[(actor, ph.index)]:
                        jj = member(c.dst, f)
                        _put(fifos[(c.name, j, jj)], local[c.tensor], shared, el,
                             f"space in channel {c.name} (to {members[c.dst][jj]})")
                if (actor, j) in out_q:
                    outs = {t: local[t] for t, a in app.model_outputs.items() if a == actor}
                    _put(out_q[(actor, j)], (f, outs), shared, el, "the output collector")
        except _Stopped:
            return
        except BaseException as e:  # any failure stops the whole run, naming where it happened
            where = (f"stage {actor} phase {ph.index} (layers {ph.layers[0]}..{ph.layers[-1]})"
                     if ph is not None else f"stage {actor}")
            shared.fault.append(_Fault(f"element {el}, {where}: {type(e).__name__}: "
                                       f"{str(e).splitlines()[0] if str(e) else ''}"))
            shared.stop.set()

    def feeder() -> None:
        try:
            readers = {t: app.model_inputs[t] for t in app.model_inputs}
            for f in range(frames):
                x = inputs(f)
                for a in {a for rs in readers.values() for a in rs}:
                    j = member(a, f)
                    _put(in_q[(a, j)], {t: x[t] for t in model_inputs if a in readers[t]},
                         shared, "source", f"space in the input queue of {a}")
        except _Stopped:
            return
        except BaseException as e:
            shared.fault.append(_Fault(f"frame source: {type(e).__name__}: {e}"))
            shared.stop.set()

    threads = [threading.Thread(target=worker, args=(a, j), name=f"hetflow-{m}", daemon=True)
               for a, ms in members.items() for j, m in enumerate(ms)]
    threads.append(threading.Thread(target=feeder, name="hetflow-source", daemon=True))
    done_at: list[float] = []
    latencies: list[float] = []
    kept: dict[int, dict[str, np.ndarray]] = {}
    out_actors = sorted(set(app.model_outputs.values()))
    complete = True
    t_start = time.perf_counter()
    for t in threads:
        t.start()
    try:
        for f in range(frames):
            result: dict[str, np.ndarray] = {}
            for a in out_actors:
                j = member(a, f)
                last = time.perf_counter()
                while True:
                    try:
                        ff, outs = out_q[(a, j)].get(timeout=POLL)
                        break
                    except queue.Empty:
                        if shared.fault:
                            raise RuntimeFault(shared.fault[0].message)
                        if time.perf_counter() - last > stall_timeout:
                            waits = "; ".join(f"{el} waits on {w}" for el, w in
                                              sorted(shared.waiting.items()))
                            raise RuntimeFault(f"stall: no frame completed for {stall_timeout:.0f}"
                                               f" s at frame {f}; {waits}")
                assert ff == f, f"frame order broken: got {ff}, expected {f}"
                result.update(outs)
            now = time.perf_counter()
            done_at.append(now)
            latencies.append(now - shared.first_start.get(f, now))
            if keep_outputs(f):
                kept[f] = result
            if on_frame:
                on_frame(f)
    except KeyboardInterrupt:
        complete = False
    finally:
        shared.stop.set()
        for t in threads:
            t.join(timeout=2.0)
    if shared.fault:
        raise RuntimeFault(shared.fault[0].message)
    n = len(done_at)
    w = min(warmup, max(n - 2, 0))
    if n - w >= 2:
        thr = (n - 1 - w) / (done_at[-1] - done_at[w]) if w > 0 else (n - 1) / (done_at[-1] - done_at[0])
        window = done_at[-1] - (done_at[w] if w else done_at[0])
    else:
        thr, window = float("nan"), 0.0
    util = {el: min(1.0, b / (done_at[-1] - t_start)) for el, b in shared.busy.items()} if n else {}
    report = RunReport("plan", n, w, thr, latency_stats(latencies[w:]), util,
                       dict(plan.predicted), complete=complete,
                       notes={"wall_s": (done_at[-1] - t_start) if n else 0.0, "window_s": window})
    return report, kept, shared
