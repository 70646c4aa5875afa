"""Run a multi-plan with every element a thread of this interpreter (`run-multi --engine
threads`) on the one firing loop: each application compiled and bound as a single plan
(`apps.app_run`), with channels of its own; one thread per element drives the lanes of every
application's worker there by priority (`runtime.loop.drive_shared`). `procs.py` runs the
same driver in one process per element.

Sub-network sessions and the reference check are the single-app engine's; the report is
`report.multi_report`.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from hetflow.backends import control_cores, pinned
from hetflow.runtime.engine import prepare
from hetflow.runtime.harness import Control, frozen_heap, stop_threads, supervise
from hetflow.runtime.loop import Dispatched, drive_shared

from hetflow.multi.apps import app_results, app_run, frames_per_app, hosts, prewarm, prioritise
from hetflow.multi.multiplan import MultiPlan
from hetflow.multi.report import MultiRunReport, multi_report

POLL = 0.01  # s: how often the supervising thread counts the frames completed


def run_threads(mp: MultiPlan, graphs: dict, frames: int, warmup: int, n_check: int,
                max_in_flight: int, stall_timeout: float, trace_path,
                progress: Callable[[str], None] | None, seed: int,
                switch_interval: float) -> MultiRunReport:
    """`run_multiplan` on the thread engine: every element a thread of this interpreter."""

    placement = hosts(mp)
    elements = {}
    for a in mp.apps:
        elements.update(a.plan.elements)
    target = warmup + frames
    control = Control()
    wakes = {el: threading.Event() for el in placement}
    prepared = {}
    try:
        for rank, a in enumerate(mp.apps):
            prepared[a.name] = prepare(a.plan, graphs[a.name], progress)
            prioritise(prepared[a.name], rank, len(mp.apps))
        runs = [app_run(i, a, prepared[a.name], n, control, max_in_flight,
                        lambda k: warmup <= k < warmup + n_check, seed, wakes,
                        trace_path is not None)
                for i, (a, n) in enumerate(zip(mp.apps, frames_per_app(mp, target)))]
        for r in runs:
            if progress:
                progress(f"warming up {r.name}")
            prewarm(prepared[r.name], seed + r.index)
        dispatched = {el: Dispatched() for el in placement}
        threads = []
        for el in placement:  # each element's workers, highest priority first (mp.apps' order)
            tenants = [t for r in runs for t in r.tenants() if t.worker.program.element == el]
            threads.append(threading.Thread(
                target=drive_shared, name=f"hetflow-{el}", daemon=True,
                args=(el, tenants, control, wakes[el], tenants[0].worker.cores,
                      dispatched[el], 0.0, mp.gpu_lanes == "shared")))

        def step() -> dict[str, int] | None:
            done = {r.name: r.done() for r in runs}
            if min(done.values()) >= target:
                return None
            time.sleep(POLL)
            return {name: n for name, n in done.items() if n < target}

        def doing(_) -> str:
            return "(" + "; ".join(f"{el}: {control.waiting.get(el, 'not started')}"
                                   for el in sorted(placement)) + ")"

        if progress:
            progress(f"running {len(mp.apps)} applications")
        with frozen_heap(switch_interval), pinned(control_cores(elements.values())):
            t0 = time.perf_counter() + 0.01  # once the heap is frozen (a full collection first)
            for r in runs:
                r.start(t0)
            try:  # (a Ctrl-C while they start stops those started)
                for t in threads:
                    t.start()
                complete = supervise(step, control, stall_timeout, doing)
            finally:
                stop_threads(control, threads)
        t_stop = time.perf_counter()
    finally:
        for pp in prepared.values():
            pp.close()
    control.raise_fault()
    return multi_report(mp, graphs, [app_results([r.measured(warmup, n_check)]) for r in runs],
                        {el: (d.delay, d.turns) for el, d in dispatched.items()}, t_stop - t0,
                        complete, warmup, seed, trace_path, "threads", None)
