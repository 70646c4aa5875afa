"""Run a multi-plan: every application fed at its period, elements shared by priority.

Each element runs `element.Element`'s loop: it releases its applications' frames at their
periods, serves a priority queue of ready firings (non-preemptive), and hands tensors to the
elements that need them. Here every element is a thread of this interpreter (tensors pass by
reference through queue.Queue inboxes); `procs.py` runs the same loop in one process per
element. An application's response time is measured from a frame's nominal release to the end
of its last firing; a response longer than the period is a missed deadline. At most
`max_in_flight` frames of an application are held by an element; past that its releases become
late (which the response times show), so memory stays bounded however long the run.

Sub-network sessions, the reference check and the report type are the single-app engine's.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hetflow.runtime.harness import Control, fault_text, stop_threads, supervise
from hetflow.runtime.report import RunReport, latency_stats
from hetflow.runtime.schedule import Firing, FrameState, Readiness, firings

from .element import Element, hosts
from .multiplan import AppEntry, MultiPlan

POLL = 0.05


@dataclass
class _App:
    index: int
    entry: AppEntry
    runners: dict  # (element, phase index) -> Runner
    source: Callable[[int], dict]
    schedule: list[Firing]  # one frame's firings, in a topological order
    flow: Readiness
    responses: list[float] = field(default_factory=list)
    execs: list[float] = field(default_factory=list)  # per frame, as responses
    done_at: list[float] = field(default_factory=list)
    late_releases: int = 0
    peak_in_flight: int = 0
    kept: dict[int, dict] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.entry.name

    def record(self, fr: FrameState, k: int, end: float, keep: bool) -> None:
        """Frame k's response ended at `end`."""
        self.responses.append(end - fr.release)
        self.execs.append(fr.exec)
        self.done_at.append(end)
        if keep:
            self.kept[k] = {t: fr.tensors[t] for t in self.entry.plan.app.model_outputs}


def make_app(index: int, entry: AppEntry, runners: dict, source: Callable[[int], dict],
             element: str | None = None) -> _App:
    """An application's schedule; with `element`, the part one element's process runs (it
    measures the response when it runs the last firing, hearing from every other element)."""
    schedule = firings(entry.plan.app)
    if element is None:
        return _App(index, entry, runners, source, schedule, Readiness(schedule))
    local = {i for i, f in enumerate(schedule) if f.actor == element}
    others = {f.actor for f in schedule} - {element}
    parts = len(others) if schedule[-1].actor == element else 0
    return _App(index, entry, runners, source, schedule, Readiness(schedule, local, parts))


@dataclass
class MultiRunReport:
    apps: list[RunReport]  # one per application: latency = response times from release
    utilisation: dict[str, float]
    wall_s: float
    complete: bool = True
    dispatch_s: dict[str, float] = field(default_factory=dict)  # element -> mean start delay
    engine: str = "threads"
    realtime: bool | None = None  # asked for: whether every element process got SCHED_FIFO

    def to_dict(self) -> dict:
        return {"apps": [a.to_dict() for a in self.apps], "utilisation": self.utilisation,
                "wall_s": self.wall_s, "complete": self.complete,
                "dispatch_s": self.dispatch_s, "engine": self.engine,
                "realtime": self.realtime}


def app_report(entry: AppEntry, index: int, responses: list[float], done_at: list[float],
               late_releases: int, peak_in_flight: int, kept: dict, warmup: int,
               complete: bool, graph, seed: int, execs: list[float] | None = None) -> RunReport:
    """One application's report: response times of the frames after `warmup`, the deadlines
    they missed, and the reference check of the kept frames (inputs from the same seeded
    source as the run). `execs`: per frame, the seconds its firings ran; the report splits
    each response into that and waiting (late release, blocking, queueing), which says whether
    a long response came from a slow firing or from the schedule."""
    from hetflow.runtime.check import check_outputs
    from hetflow.runtime.inputs import random_source

    resp = responses[warmup:]
    done = done_at[warmup:]
    thr = (len(done) - 1) / (done[-1] - done[0]) if len(done) >= 2 else float("nan")
    missed = int(np.sum(np.asarray(resp) > entry.period)) if entry.period > 0 else 0
    r = RunReport(entry.name, len(resp), min(warmup, len(responses)), thr, latency_stats(resp),
                  {}, dict(entry.predicted), complete=complete,
                  notes={"period_s": entry.period, "priority": entry.priority,
                         "missed": missed, "late_releases": late_releases,
                         "peak_in_flight": peak_in_flight})
    r.predicted.pop("tasks", None)
    if execs is not None and len(execs) == len(responses):
        ex = np.asarray(execs[warmup:], dtype=float)
        r.notes["exec_s"] = latency_stats(ex)
        r.notes["wait_s"] = latency_stats(np.asarray(resp, dtype=float) - ex)
    if kept:
        src = random_source(graph, seed + index)
        r.max_abs_error = check_outputs(graph, entry.plan.app, kept, src)
        r.checked_frames = len(kept)
    return r


def _prepare(mp: MultiPlan, graphs: dict, progress) -> dict[str, object]:
    from hetflow.runtime.engine import prepare

    return {a.name: prepare(a.plan, graphs[a.name], progress) for a in mp.apps}


def _prewarm(app: _App, graph, only: set[int] | None = None) -> None:
    """Run one frame through every session (or the firings in `only`, those of one element)
    in phase order before the clock starts: first calls allocate and tune, and would otherwise
    show up as missed deadlines. An input another element would produce is zeros of its shape."""
    from hetflow.runtime.inputs import _NP

    tensors = dict(app.source(0))
    for i, f in enumerate(app.schedule):
        if only is not None and i not in only:
            continue
        for t in f.inputs:
            if t not in tensors:
                info = graph.tensors[t]
                tensors[t] = np.zeros(info.shape, _NP.get(info.dtype, np.float32))
        tensors.update(app.runners[(f.actor, f.phase)].run({t: tensors[t] for t in f.inputs}))


def run_threads(mp: MultiPlan, graphs: dict, frames: int, warmup: int, n_check: int,
                max_in_flight: int, stall_timeout: float, trace_path,
                progress: Callable[[str], None] | None, seed: int,
                switch_interval: float) -> MultiRunReport:
    """`run_multiplan` on the thread engine: every element a thread of this interpreter."""
    from hetflow.backends import caller_cores_of, control_cores, pin_current_thread, pinned
    from hetflow.runtime.engine import frozen_heap
    from hetflow.runtime.inputs import random_source

    placement = hosts(mp)
    elements = {}
    for a in mp.apps:
        elements.update(a.plan.elements)
    inboxes = {el: queue.Queue() for el in placement}
    prepared = _prepare(mp, graphs, progress)
    loops: dict[str, Element] = {}
    control = Control()
    try:
        for el, names in placement.items():
            apps = [make_app(i, e, prepared[e.name].runners, random_source(graphs[e.name], seed + i),
                             el) for i, e in enumerate(mp.apps) if e.name in names]
            loops[el] = Element(el, apps, max_in_flight, lambda k: warmup <= k < warmup + n_check,
                                trace_path is not None, inboxes, spin=0.0)
            for a in apps:
                if progress:
                    progress(f"warming up {a.name} on {el}")
                _prewarm(a, graphs[a.name], a.flow.local)
        collectors = [a for lp in loops.values() for a in lp.apps if lp.collects[a.index]]
        target = frames + warmup
        t0 = 0.0  # set once the heap is frozen: a full collection first can take 100s of ms

        def worker(el: str) -> None:
            lp = loops[el]
            try:
                pin_current_thread(caller_cores_of(
                    (r for a in lp.apps for (e, _), r in a.runners.items() if e == el),
                    elements[el]))
                lp.run(t0, control.stop.is_set)
            except BaseException as e:  # stop everything, naming where it happened
                control.fail(fault_text(el, lp.what, e))

        def step() -> int | None:
            done = [len(a.responses) for a in collectors]
            if min(done) >= target:
                return None
            time.sleep(POLL / 5)
            return sum(done)

        def doing(_: int) -> str:
            return "(" + "; ".join(f"{e}: {lp.what}" for e, lp in sorted(loops.items())) + ")"

        threads = [threading.Thread(target=worker, args=(el,), name=f"hetflow-{el}", daemon=True)
                   for el in loops]
        if progress:
            progress(f"running {len(mp.apps)} applications")
        with frozen_heap(switch_interval), pinned(control_cores(elements.values())):
            t0 = time.perf_counter() + 0.01
            for t in threads:
                t.start()
            try:
                complete = supervise(step, control, stall_timeout, doing)
            finally:
                stop_threads(control, threads)
        t_stop = time.perf_counter()
    finally:
        for pp in prepared.values():
            pp.close()
    control.raise_fault()
    return multi_report(mp, graphs, {el: lp.results() for el, lp in loops.items()}, t_stop - t0,
                        complete, warmup, seed, trace_path, "threads", None)


def multi_report(mp: MultiPlan, graphs: dict, results: dict[str, dict], wall: float,
                 complete: bool, warmup: int, seed: int, trace_path, engine: str,
                 realtime: bool | None) -> MultiRunReport:
    """The run's report from every element's `Element.results()`, its trace written."""
    reports = []
    for i, entry in enumerate(mp.apps):
        parts = [r["apps"][entry.name] for r in results.values() if entry.name in r["apps"]]
        d = next(p for p in parts if p["collector"])
        reports.append(app_report(entry, i, d["responses"], d["done_at"],
                                  sum(p["late_releases"] for p in parts),
                                  max(p["peak_in_flight"] for p in parts), d["kept"], warmup,
                                  complete, graphs[entry.name], seed, d["execs"]))
    util = {el: min(1.0, r["busy"] / wall) for el, r in results.items()} if wall > 0 else {}
    dispatch = {el: r["dispatch"][0] / r["dispatch"][1] for el, r in results.items()
                if r["dispatch"][1]}
    events = [ev for r in results.values() for ev in r["events"]]
    if trace_path is not None and events:
        from hetflow.runtime.trace import write_trace

        write_trace(trace_path, events, min(ev[4] for ev in events))
    return MultiRunReport(reports, util, wall, complete, dispatch, engine, realtime)
