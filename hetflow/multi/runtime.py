"""Run a multi-plan: every application fed at its period, elements shared by priority.

Unlike the single-application engine (one worker per element per application, FIFOs between
them), here one worker thread per element serves a priority queue of *ready firings* of every
application on it: (priority, frame, phase order). Non-preemptive: a running firing completes;
then the worker takes the highest-priority ready firing. This is the scheduling model the
schedulability analysis assumes (Eq. 11's blocking term is the firing that was already running).

A firing (application, actor, phase, frame) is ready when the phases that produce its inputs in
that frame are done and its actor's previous phase is done (for phase 0: the actor's last phase
of the previous frame), so every actor fires its phases in CSDF order. Each application has a
source thread that releases frame k at start + k * period; its response time is measured from
that nominal release to the end of the frame's last firing, and a response longer than the
period is a missed deadline. At most `max_in_flight` frames of an application are held; when
that many are pending the source waits (its releases become late, which the response times
show), so memory stays bounded however long the run.

Sub-network sessions, the reference check and the report type are the single-app engine's.
"""
from __future__ import annotations

import heapq
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hetflow.runtime.harness import Control, fault_text, stop_threads, supervise
from hetflow.runtime.report import RunReport, latency_stats
from hetflow.runtime.schedule import Firing, FrameState, Readiness, firings

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
    space: threading.Condition | None = None

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


class _Engine:
    """Shared state of one run, under one lock: ready queues per element, frames in flight."""

    def __init__(self, apps: list[_App], elements: dict, max_in_flight: int, trace: bool):
        self.apps, self.elements = apps, elements
        self.max_in_flight = max_in_flight
        self.lock = threading.Lock()
        self.ready = {e: [] for e in elements}
        self.wake = {e: threading.Condition(self.lock) for e in elements}
        self.progress = threading.Condition(self.lock)
        for a in apps:
            a.space = threading.Condition(self.lock)
        self.control = Control()
        self.stop, self.faults = self.control.stop, self.control.faults
        self.busy = {e: 0.0 for e in elements}
        # dispatch delay: from a firing being ready (and its element free) to its start
        self.dispatch = {e: [0.0, 0] for e in elements}
        self.free_at = {e: 0.0 for e in elements}
        self.doing: dict[str, str] = {e: "idle" for e in elements}
        self.events: list[tuple] | None = [] if trace else None
        self.keep: Callable[[int, int], bool] = lambda app, f: False
        self.t0 = 0.0

    # ---- readiness (called with the lock held) ----
    def _push(self, app: _App, frame: int, i: int) -> None:
        el = app.schedule[i].actor
        heapq.heappush(self.ready[el], (app.entry.priority, frame, i, app.index,
                                        time.perf_counter()))
        self.wake[el].notify()

    def release(self, app: _App, k: int, when: float, inputs: dict) -> None:
        for i in app.flow.open(k, when, inputs):
            self._push(app, k, i)
        app.peak_in_flight = max(app.peak_in_flight, len(app.flow.frames))

    # ---- threads ----
    def worker(self, el: str) -> None:
        from hetflow.backends import caller_cores_of, pin_current_thread

        what = ""
        try:
            pin_current_thread(caller_cores_of(
                (r for a in self.apps for (e, _), r in a.runners.items() if e == el),
                self.elements[el]))
            while True:
                with self.lock:
                    while not self.ready[el]:
                        if self.stop.is_set():
                            return
                        self.wake[el].wait(POLL)
                    if self.stop.is_set():
                        return
                    _, k, i, ai, ready_at = heapq.heappop(self.ready[el])
                    app = self.apps[ai]
                    f = app.schedule[i]
                    what = f"application {app.name}, stage {f.actor} phase {f.phase}, frame {k}"
                    self.doing[el] = what
                    feeds = {t: app.flow.frames[k].tensors[t] for t in f.inputs}
                t0 = time.perf_counter()
                out = app.runners[(el, f.phase)].run(feeds)
                t1 = time.perf_counter()
                with self.lock:
                    self.busy[el] += t1 - t0
                    d = self.dispatch[el]
                    d[0] += max(0.0, t0 - max(ready_at, self.free_at[el]))
                    d[1] += 1
                    self.free_at[el] = t1
                    self.doing[el] = "idle"
                    if self.events is not None:
                        self.events.append((el, f"{app.name}:{f.actor}", f.phase, k, t0, t1))
                    app.flow.frames[k].tensors.update(out)
                    ready, _, done = app.flow.ended(k, i, t1, t1 - t0)
                    for k2, i2 in ready:
                        self._push(app, k2, i2)
                    if done:
                        app.record(app.flow.frames.pop(k), k, t1, self.keep(app.index, k))
                        app.space.notify_all()
                        self.progress.notify_all()
        except BaseException as e:  # stop everything, naming where it happened
            self.faults.append(fault_text(el, what or "worker", e))
            self.stop.set()
            with self.lock:
                self.progress.notify_all()

    def source(self, app: _App) -> None:
        from hetflow.backends import control_cores, pin_current_thread

        k = 0
        period = app.entry.period
        try:
            pin_current_thread(control_cores(self.elements.values()))
            while not self.stop.is_set():
                when = self.t0 + k * period
                while (delay := when - time.perf_counter()) > 0:
                    if self.stop.wait(min(delay, POLL)):
                        return
                inputs = app.source(k)
                with self.lock:
                    if len(app.flow.frames) >= self.max_in_flight:
                        app.late_releases += 1
                        while (len(app.flow.frames) >= self.max_in_flight
                               and not self.stop.is_set()):
                            app.space.wait(POLL)
                    if self.stop.is_set():
                        return
                    self.release(app, k, when, inputs)
                k += 1
        except BaseException as e:
            self.faults.append(f"frame source of {app.name}: {type(e).__name__}: {e}")
            self.stop.set()

    def run(self, frames: int, warmup: int, stall_timeout: float) -> tuple[bool, float]:
        """Until every application has completed warmup + frames frames. Returns (complete,
        wall seconds)."""
        threads = [threading.Thread(target=self.worker, args=(e,), name=f"hetflow-{e}",
                                    daemon=True) for e in self.elements]
        threads += [threading.Thread(target=self.source, args=(a,), name=f"hetflow-src-{a.name}",
                                     daemon=True) for a in self.apps]
        self.t0 = time.perf_counter() + 0.01
        for t in threads:
            t.start()
        target = frames + warmup

        def step() -> int | None:
            with self.lock:
                if all(len(a.responses) >= target for a in self.apps):
                    return None
                self.progress.wait(POLL)
                return sum(len(a.responses) for a in self.apps)

        def doing(_: int) -> str:
            return "(" + "; ".join(f"{e}: {d}" for e, d in sorted(self.doing.items())) + ")"

        try:
            complete = supervise(step, self.control, stall_timeout, doing)
        finally:
            stop_threads(self.control, threads)
        self.control.raise_fault()
        return complete, time.perf_counter() - self.t0


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
    missed = int(np.sum(np.asarray(resp) > entry.period))
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
    from hetflow.backends import control_cores, pinned
    from hetflow.runtime.engine import frozen_heap
    from hetflow.runtime.inputs import random_source

    elements = {}
    for a in mp.apps:
        elements.update(a.plan.elements)
    prepared = _prepare(mp, graphs, progress)
    try:
        apps = []
        for i, entry in enumerate(mp.apps):
            apps.append(make_app(i, entry, prepared[entry.name].runners,
                                 random_source(graphs[entry.name], seed + i)))
        for a in apps:
            if progress:
                progress(f"warming up {a.name}")
            _prewarm(a, graphs[a.name])
        eng = _Engine(apps, elements, max_in_flight, trace_path is not None)
        eng.keep = lambda ai, k: warmup <= k < warmup + n_check
        if progress:
            progress(f"running {len(apps)} applications")
        with frozen_heap(switch_interval), pinned(control_cores(elements.values())):
            complete, wall = eng.run(frames, warmup, stall_timeout)
    finally:
        for pp in prepared.values():
            pp.close()
    reports = [app_report(a.entry, a.index, a.responses, a.done_at, a.late_releases,
                          a.peak_in_flight, a.kept, warmup, complete, graphs[a.name], seed,
                          a.execs)
               for a in apps]
    util = {e: min(1.0, b / wall) for e, b in eng.busy.items()} if wall > 0 else {}
    if trace_path is not None and eng.events:
        from hetflow.runtime.trace import write_trace

        write_trace(trace_path, eng.events, min(ev[4] for ev in eng.events))
    dispatch = {e: total / n for e, (total, n) in eng.dispatch.items() if n}
    return MultiRunReport(reports, util, wall, complete, dispatch)
