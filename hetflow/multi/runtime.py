"""Run a multi-plan with every element a thread of this interpreter (`run-multi --engine
threads`): each thread runs `element.Element`'s loop (releases at the applications' periods, a
priority queue of ready firings, tensors handed on); tensors pass by reference through
queue.Queue inboxes. `procs.py` runs the same loop in one process per element.

Sub-network sessions and the reference check are the single-app engine's; the report is
`report.multi_report`.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable

from hetflow.runtime.harness import Control, fault_text, stop_threads, supervise

from hetflow.multi.element import Element, hosts, make_app, prewarm
from hetflow.multi.multiplan import MultiPlan
from hetflow.multi.report import MultiRunReport, multi_report
from hetflow.backends import caller_cores_of, control_cores, pin_current_thread, pinned
from hetflow.runtime.engine import prepare
from hetflow.runtime.harness import frozen_heap
from hetflow.runtime.inputs import random_source

POLL = 0.05


def _prepare(mp: MultiPlan, graphs: dict, progress) -> dict[str, object]:

    return {a.name: prepare(a.plan, graphs[a.name], progress) for a in mp.apps}


def run_threads(mp: MultiPlan, graphs: dict, frames: int, warmup: int, n_check: int,
                max_in_flight: int, stall_timeout: float, trace_path,
                progress: Callable[[str], None] | None, seed: int,
                switch_interval: float) -> MultiRunReport:
    """`run_multiplan` on the thread engine: every element a thread of this interpreter."""

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
                prewarm(a, graphs[a.name], a.flow.local)
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

        def step() -> dict[str, int] | None:
            done = {a.name: len(a.responses) for a in collectors}
            if min(done.values()) >= target:
                return None
            time.sleep(POLL / 5)
            return {name: n for name, n in done.items() if n < target}

        def doing(_: int) -> str:
            return "(" + "; ".join(f"{e}: {lp.what}" for e, lp in sorted(loops.items())) + ")"

        threads = [threading.Thread(target=worker, args=(el,), name=f"hetflow-{el}", daemon=True)
                   for el in loops]
        if progress:
            progress(f"running {len(mp.apps)} applications")
        with frozen_heap(switch_interval), pinned(control_cores(elements.values())):
            t0 = time.perf_counter() + 0.01
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
    return multi_report(mp, graphs, {el: lp.results() for el, lp in loops.items()}, t_stop - t0,
                        complete, warmup, seed, trace_path, "threads", None)


