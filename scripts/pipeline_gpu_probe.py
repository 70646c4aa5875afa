"""Why a GPU stage fires slower inside a GPU/CPU pipeline than alone (GPU machine).

For each saved plan (e.g. a bench's pipeline plans), all in one process, one after another:
  engine         the plan run by the engine, traced: frames/s, median firing of each element
  +heap          glibc's malloc keeps freed memory up to 32 MB blocks in its heaps instead of
                 mapping and unmapping each large array (no page faults, no TLB shootdowns)
  apart          every worker of the plan firing its own phases on fixed inputs at once, with
                 no hand-off between them (the load of the pipeline without its channels)
  gpu alone      the GPU element's lanes alone on fixed inputs
  split          as `apart`, but the CPU elements fire in a second process: the GPU's lanes
                 share the machine with them, not the interpreter
Each also reports the lag of a probe thread's 1 ms sleeps (median, p90): how long a thread
that wakes waits for the interpreter and a core.
(probe1-3 in docs/results/lanes_h100/probe also ran `engine+copy`: outputs copied out of static
pinned buffers, which the CUDA backend has done since.)
Usage: python scripts/pipeline_gpu_probe.py PLAN.json[:MODEL] ... [--frames N] [--seconds S] [--heap]
(--heap changes the process for good: give one plan per process)
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import threading
import time


from hetflow.backends import caller_cores_of, pin_current_thread
from hetflow.mapping.mapping import group_members
from hetflow.mapping.plan import Plan
from hetflow.model import resolve_model
from hetflow.profile.measure import random_feeds
from hetflow.runtime.engine import prepare, run_prepared
from hetflow.runtime.inputs import random_source


@contextlib.contextmanager
def lag_probe(out: dict):
    stop, lags = threading.Event(), []

    def probe():
        while not stop.is_set():
            t = time.perf_counter()
            time.sleep(0.001)
            lags.append(time.perf_counter() - t - 0.001)

    th = threading.Thread(target=probe, daemon=True)
    th.start()
    try:
        yield
    finally:
        stop.set()
        th.join(2)
        lags.sort()
        out["lag_ms"] = (round(1e3 * lags[len(lags) // 2], 3), round(1e3 * lags[int(0.9 * len(lags))], 3)) if lags else None


def keep_heap() -> None:
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
    libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD


def engine_run(pp, frames: int, row: dict) -> None:
    src = random_source(pp.graph)
    with lag_probe(row):
        report, _, state = run_prepared(pp, src, frames, warmup=frames // 10, trace=True,
                                        stall_timeout=60)
    firing: dict[str, list] = {}
    for el, _actor, _ph, _f, t0, t1 in state.events:
        firing.setdefault(el.split("/")[0], []).append(t1 - t0)
    row["fps"] = round(report.throughput, 1)
    row["firing_ms"] = {k: round(1e3 * statistics.median(v), 3) for k, v in sorted(firing.items())}


def apart_run(pp, seconds: float, row: dict, only_gpu: bool = False,
              only_cpu: bool = False) -> None:
    """Every (element, lane) worker fires its phases on fixed inputs, no hand-offs."""
    plan = pp.plan
    workers = []
    for actor, phases in plan.app.phases.items():
        for el in group_members(actor):
            element = plan.elements[el]
            if only_gpu and element.kind != "gpu" or only_cpu and element.kind == "gpu":
                continue
            for lane in range(plan.mapping.lanes_of(el)):
                rs = [pp.runner(el, ph.index, lane) for ph in phases]
                feeds = [random_feeds(pp.graph, r.inputs) for r in rs]
                workers.append((el, element, rs, feeds))
    stop = threading.Event()
    times: dict[str, list] = {}
    lock = threading.Lock()

    def work(el, element, rs, feeds):
        pin_current_thread(caller_cores_of(rs, element))
        mine = []
        while not stop.is_set():
            for r, x in zip(rs, feeds):
                t0 = time.perf_counter()
                r.run(x)
                mine.append(time.perf_counter() - t0)
        with lock:
            times.setdefault(el, []).extend(mine)

    ths = [threading.Thread(target=work, args=w, daemon=True) for w in workers]
    with lag_probe(row):
        for t in ths:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in ths:
            t.join(10)
    row["firings_per_s"] = {k: round(len(v) / seconds) for k, v in sorted(times.items())}
    row["firing_ms"] = {k: round(1e3 * statistics.median(v), 3) for k, v in sorted(times.items()) if v}


def _cpu_child(file: str, model: str, seconds: float, ready, go, results) -> None:
    plan = Plan.load(file)
    graph = resolve_model(model or plan.model_name, None, plan.fuse)
    pp = prepare(plan, graph, only={n for n, e in plan.elements.items() if e.kind != "gpu"})
    ready.set()
    go.wait(300)
    row: dict = {}
    apart_run(pp, seconds, row, only_cpu=True)
    results.put(row)
    pp.close()


def split_run(pp, file: str, model: str, seconds: float, row: dict) -> None:
    """The CPU elements' workers in a child process, the GPU's lanes here, all firing at once."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    ready, go, results = ctx.Event(), ctx.Event(), ctx.Queue()
    child = ctx.Process(target=_cpu_child, args=(file, model, seconds, ready, go, results))
    child.start()
    try:
        if not ready.wait(240):
            raise RuntimeError("the CPU process did not get ready")
        go.set()
        apart_run(pp, seconds, row, only_gpu=True)
        cpu = results.get(timeout=120)
        row["firings_per_s"].update(cpu["firings_per_s"])
        row["firing_ms"].update(cpu["firing_ms"])
        row["cpu_lag_ms"] = cpu.get("lag_ms")
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("plans", nargs="+")
    ap.add_argument("--frames", type=int, default=4000)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--heap", action="store_true", help="also the +heap variants (last)")
    a = ap.parse_args()
    out = os.environ.get("OUT", ".")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "pipeline_gpu_probe.json")
    rows = []
    for spec in a.plans:
        file, _, model = spec.partition(":")
        plan = Plan.load(file)
        graph = resolve_model(model or plan.model_name, None, plan.fuse)
        pp = prepare(plan, graph)
        design = plan.mapping.describe() if hasattr(plan.mapping, "describe") else ""
        crossing = {c.name: c.nbytes for c in plan.app.channels}
        print(f"{file}: {plan.model_name} {design} predicted {plan.predicted.get('throughput')}"
              f", bytes per frame across channels {crossing}", flush=True)
        try:
            eng = lambda r: engine_run(pp, a.frames, r)  # noqa: E731
            variants = [("engine", eng),
                        ("apart", lambda r: apart_run(pp, a.seconds, r)),
                        ("gpu alone", lambda r: apart_run(pp, a.seconds, r, only_gpu=True)),
                        ("split", lambda r: split_run(pp, file, model, a.seconds, r)),
                        ("apart", lambda r: apart_run(pp, a.seconds, r)),
                        ("split", lambda r: split_run(pp, file, model, a.seconds, r))]
            if a.heap:
                variants += [("engine+heap", eng),
                             ("apart+heap", lambda r: apart_run(pp, a.seconds, r))]
            for name, fn in variants:
                row = {"plan": file, "model": plan.model_name, "variant": name}
                if "+heap" in name:
                    keep_heap()  # for the rest of the process: these variants come last
                fn(row)
                rows.append(row)
                print("  " + json.dumps(row), flush=True)
                with open(path, "w") as f:
                    json.dump(rows, f, indent=1)
        finally:
            pp.close()


if __name__ == "__main__":
    main()
