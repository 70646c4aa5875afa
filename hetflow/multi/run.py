"""`run_multiplan`: several CNNs at once on one machine, on the engine that suits the plan (the
thread engine of runtime.py, or one process per element, procs.py); both run the one firing
loop of single plans, lanes, batches and interleaved phase orders included."""
from __future__ import annotations

from typing import Callable

from hetflow.errors import InputError

from hetflow.multi.multiplan import MultiPlan
from hetflow.multi.report import MultiRunReport
from hetflow.multi.apps import check_in_flight
from hetflow.multi.apps import hosts
from hetflow.multi.procs import run_processes
from hetflow.multi.runtime import run_threads
from hetflow.plan.plan import check_plan_lanes
from hetflow.platform.detect import check_cores_present
from hetflow.runtime.api import load_plan_model


def run_multiplan(mp: MultiPlan, graphs: dict | None = None, frames: int = 1000,
                  warmup: int = 10, check: str = "first", check_frames: int = 4,
                  max_in_flight: int = 4, stall_timeout: float = 30.0,
                  trace_path=None, progress: Callable[[str], None] | None = None,
                  seed: int = 0, switch_interval: float = 1e-4,
                  engine: str = "auto", realtime: bool = False) -> MultiRunReport:
    """Run every application of `mp` concurrently until each has completed `warmup + frames`
    frames; report per application the response times of the last `frames` (p50/p99/max), the
    deadlines missed among them, and the reference check of the first `check_frames`.
    `switch_interval`: the GIL switch interval during the run (0.1 ms: a worker whose firing is
    due waits at most that long for another thread's Python code; 0 keeps Python's 5 ms).
    `engine`: threads (one interpreter), processes (one per element, procs.py), or auto:
    processes where every application runs on one element (as measured), else threads.
    `realtime` (process engine): the element processes run under SCHED_FIFO during the run,
    where the OS allows it (the report says whether it did)."""

    if check not in ("first", "none"):
        raise InputError(f"--check {check!r}: use first or none")
    if frames < 1 or warmup < 0:
        raise InputError("--frames must be at least 1 and --warmup at least 0")
    if max_in_flight < 1:
        raise InputError("--max-in-flight must be at least 1")
    if not 0 <= switch_interval <= 0.1:
        raise InputError(f"--switch-interval {switch_interval}: give seconds between 0 and 0.1")
    if engine not in ("auto", "threads", "processes"):
        raise InputError(f"--engine {engine!r}: use auto, threads or processes")
    mp.validate()
    check_in_flight(mp, max_in_flight)

    for a in mp.apps:
        check_cores_present(a.plan.elements.values(), f"application {a.name}")
        try:
            check_plan_lanes(a.plan.mapping, a.plan.elements)
        except InputError as e:
            raise InputError(f"application {a.name}: {e}") from None

    if engine == "auto":
        engine = "processes" if all(len(set(a.plan.elements)) == 1 for a in mp.apps) else "threads"
    if realtime and engine == "threads":
        raise InputError("--realtime needs the process engine (--engine processes)")
    if engine == "processes":
        hosts(mp)  # refuse an unsupported plan before loading anything
        graphs = graphs or {a.name: load_plan_model(a.plan) for a in mp.apps}
        n_check = check_frames if check == "first" else 0
        return run_processes(mp, graphs, frames, warmup, n_check, max_in_flight,
                             stall_timeout, trace_path, progress, seed, realtime)
    graphs = graphs or {a.name: load_plan_model(a.plan) for a in mp.apps}
    n_check = check_frames if check == "first" else 0
    return run_threads(mp, graphs, frames, warmup, n_check, max_in_flight, stall_timeout,
                       trace_path, progress, seed, switch_interval)
