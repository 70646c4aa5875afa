"""Threads or processes for a single-CNN pipeline, measured: the same plan (contiguous stages,
one element each, no replica groups) run by the thread engine (`hetflow run`: workers and FIFOs
in one interpreter) and by the element loop in one process per element (`run-multi --engine
processes`, free-running: period 0, at most `capacity_frames` frames in flight per element),
alternately, `repeats` times each; medians of throughput and p50 latency.

Models: `noop` (a chain of tiny layers: what is left is the engine), and any zoo name or ONNX
file, cut into `stages` stages of about equal FLOPs on the machine's cores (one core each,
cores reused when there are more stages than cores).
Usage: python -m hetflow.bench.threads_vs_processes [--stages N] [--frames F] MODEL ...
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.mapping.mapping import Mapping
from hetflow.mapping.plan import Plan
from hetflow.platform.spec import ProcessingElement


def staged_plan(graph, stages: int) -> Plan:
    """`graph` cut into `stages` contiguous stages of about equal FLOPs, one core each."""
    layers = graph.layers
    total = sum(l.flops or 0 for l in layers) or len(layers)
    cores = sorted(os.sched_getaffinity(0))
    names = [f"cpu{i}" for i in range(stages)]
    assignment, acc = {}, 0.0
    for l in layers:
        share = (l.flops or 0) / total if total != len(layers) else 1 / len(layers)
        stage = min(stages - 1, int(acc * stages))
        assignment[l.name] = names[stage]
        acc += share
    used = sorted(set(assignment.values()))
    elements = {n: ProcessingElement(n, "cpu", (cores[i % len(cores)],))
                for i, n in enumerate(names) if n in used}
    app = cnn_to_csdf(graph, assignment, "paper")
    return Plan(graph.name, graph.model_hash, graph.source, "threads-vs-processes",
                Mapping(assignment, "paper"), app, elements, 2, {"throughput": 0.0}, "stages",
                fuse=True)


def load(name: str, tmp: str):
    from hetflow.model import load_model, resolve_model
    from hetflow.model.synthetic import random_cnn_model

    if name == "noop":  # tiny layers, saved so that the element processes can load them
        import onnx

        path = os.path.join(tmp, "noop.onnx")
        onnx.save(random_cnn_model(6, 0, channels=1, size=1, branchiness=0.0), path)
        return load_model(path, fuse=True)
    return resolve_model(name, fuse=True)


def compare(name: str, stages: int, frames: int, repeats: int) -> dict:
    from hetflow.multi.multiplan import AppEntry, MultiPlan
    from hetflow.multi.run import run_multiplan
    from hetflow.runtime.api import run_plan

    with tempfile.TemporaryDirectory() as tmp:
        graph = load(name, tmp)
        plan = staged_plan(graph, stages)
        multi = MultiPlan(plan.platform_name, [AppEntry(graph.name, 0.0, 1, plan)])
        runs: dict[str, list[tuple[float, float]]] = {"threads": [], "processes": []}
        for _ in range(repeats):
            r = run_plan(plan, graph, frames, frames // 10, check="first")
            assert r.checked_frames and r.max_abs_error < 1e-3, r.max_abs_error
            runs["threads"].append((r.throughput, r.latency["p50"]))
            m = run_multiplan(multi, {graph.name: graph}, frames, frames // 10, check="first",
                              max_in_flight=max(1, plan.capacity_frames), engine="processes")
            a = m.apps[0]
            assert a.checked_frames and a.max_abs_error < 1e-3, a.max_abs_error
            runs["processes"].append((a.throughput, a.latency["p50"]))
    row = {"model": name, "stages": len(plan.elements), "frames": frames, "runs": runs}
    for eng, rs in runs.items():
        row[f"{eng}_fps"] = statistics.median(t for t, _ in rs)
        row[f"{eng}_p50_ms"] = 1e3 * statistics.median(p for _, p in rs)
    row["processes_over_threads"] = row["processes_fps"] / row["threads_fps"]
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["noop", "squeezenet1_0", "resnet18"])
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--frames", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("-o", "--output", help="write the rows as JSON here")
    a = ap.parse_args(argv)
    rows = []
    for m in a.models:
        frames = a.frames * 20 if m == "noop" else a.frames
        rows.append(compare(m, a.stages, frames, a.repeats))
        print(json.dumps(rows[-1]), flush=True)
    print(f"{'model':16} {'stages':>6} {'threads fps':>12} {'processes fps':>14} {'ratio':>6} "
          f"{'p50 ms thr/proc':>16}")
    for r in rows:
        print(f"{r['model']:16} {r['stages']:>6} {r['threads_fps']:>12.1f} "
              f"{r['processes_fps']:>14.1f} {r['processes_over_threads']:>6.2f} "
              f"{r['threads_p50_ms']:>7.2f}/{r['processes_p50_ms']:.2f}")
    if a.output:
        from hetflow.io import write_json

        write_json(a.output, rows)


if __name__ == "__main__":
    from .script import run_script

    run_script(main, "python -m hetflow.bench.threads_vs_processes")
