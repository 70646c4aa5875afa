"""One layer on two CPU cores: split by output channels or rows (one part per core,
single-threaded, run by hetflow's engine, a Concat after) against ONNX Runtime's own two-thread
intra-op parallelism of the same layer, and against one core. Each design runs as a plan
through the engine with outputs checked, so the figures are what a user of either would see.

Usage: python -m hetflow.bench.split_bench [MODEL ...] [--layers 2] [--frames 300]
[--axis channels|rows] [--json]
(default: alexnet vgg19 resnet18; the heaviest `--layers` convolutions of each, grouped ones
too where rows are split).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import onnx

from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.mapping.mapping import Mapping, group_members
from hetflow.mapping.plan import Plan
from hetflow.model import resolve_model
from hetflow.model.reader import load_model
from hetflow.model.split import LayerSplit, apply_splits, channels_for, split_size
from hetflow.model.subnet import extract_subnet
from hetflow.platform.spec import ProcessingElement


def _plan(graph, assignment, elements) -> Plan:
    app = cnn_to_csdf(graph, assignment, "maximal")
    used = {e: elements[e] for a in app.phases for e in group_members(a)}
    return Plan(graph.name, graph.model_hash, graph.source, "here", Mapping(assignment, "maximal"),
                app, used, 2, {"throughput": 0.0}, "split_bench", fuse=True)


def measure_layer(graph, layer: str, cores: tuple[int, int], frames: int, ratio: float = 0.5,
                  axis: str = "channels") -> dict:
    from hetflow.runtime.api import run_plan

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "layer.onnx"
        onnx.save(extract_subnet(graph, [layer]).model, path)
        one = load_model(path, fuse=True, name=f"{graph.name}:{layer}")
        els = {"cpu0": ProcessingElement("cpu0", "cpu", (cores[0],)),
               "cpu1": ProcessingElement("cpu1", "cpu", (cores[1],)),
               "cpu0-1": ProcessingElement("cpu0-1", "cpu", cores)}
        head = one.layers[0].name
        parts = channels_for([ratio, 1 - ratio], split_size(one, head, axis), axis)
        split = apply_splits(one, [LayerSplit(head, parts, axis)], True)
        designs = {
            "one core": (one, {l.name: "cpu0" for l in one.layers}),
            "ORT 2 threads": (one, {l.name: "cpu0-1" for l in one.layers}),
            "split, a part per core": (split, {l.name: ("cpu1" if l.name.endswith(
                ("/part1", "/slice1")) else "cpu0") for l in split.layers}),
        }
        out = {"model": graph.name, "layer": layer, "op": graph.layer(layer).op_type,
               "axis": axis, axis: list(parts), "designs": {}}
        for name, (g, assignment) in designs.items():
            r = run_plan(_plan(g, assignment, els), g, frames=frames, warmup=frames // 10,
                         check="first")
            out["designs"][name] = {"fps": r.throughput, "p50_ms": r.latency["p50"] * 1e3,
                                    "max_abs_error": r.max_abs_error}
        d = out["designs"]
        out["split_vs_ort2"] = d["split, a part per core"]["fps"] / d["ORT 2 threads"]["fps"]
        out["ort2_vs_one"] = d["ORT 2 threads"]["fps"] / d["one core"]["fps"]
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["alexnet", "vgg19", "resnet18"])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--axis", choices=["channels", "rows"], default="channels")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("split_bench: needs two cores")
    rows = []
    for m in a.models:
        g = resolve_model(m, None, True)
        convs = sorted((l for l in g.layers if l.op_type.split("+")[0] == "Conv"
                        and (a.axis == "rows" or int(l.attrs.get("group", 1) or 1) == 1)),
                       key=lambda l: -(l.flops or 0))[:a.layers]
        for lay in convs:
            r = measure_layer(g, lay.name, (cores[0], cores[1]), a.frames, axis=a.axis)
            rows.append(r)
            if not a.json:
                d = r["designs"]
                print(f"{m} {lay.name} ({lay.flops / 1e9:.2f} GFLOP, {a.axis} "
                      f"{r[a.axis]}): one core "
                      f"{d['one core']['fps']:.1f}, ORT 2 threads {d['ORT 2 threads']['fps']:.1f}, "
                      f"split {d['split, a part per core']['fps']:.1f} frames/s -> split / ORT2 "
                      f"{r['split_vs_ort2']:.2f}", flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    from .script import run_script

    run_script(main, "python -m hetflow.bench.split_bench")
