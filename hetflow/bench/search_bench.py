"""Time the mapping strategies on zoo models with a synthetic profile of a 16-core + 1 GPU server.

The profile is *estimated*, not measured: a layer takes `flops / cpu_flops + 5 us` on one core
and 1/20 of that on the GPU; moving n bytes costs `a + n * b` with a PCIe-like link to the GPU
and a memory-copy link between cores. It is good for comparing search strategies (their speed,
and what each predicts on one model), not for predicting a real machine.

    python -m hetflow.bench.search_bench                       # the default table
    python -m hetflow.bench.search_bench densenet121 ga pipeline
"""
from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from hetflow.errors import InputError
from hetflow.mapping.problem import Problem
from hetflow.mapping.strategies.base import get_strategy
from hetflow.model import resolve_model
from hetflow.platform.spec import ProcessingElement

CPU_FLOPS = 50e9  # one core, fp32 with SIMD
LAYER_OVERHEAD = 5e-6  # per layer on a core (dispatch, memory traffic of small layers)
GPU_SPEEDUP = 20.0
LINKS = {  # (latency s, seconds per byte)
    "cpu-cpu": (5e-6, 1 / 10e9),
    "cpu-gpu": (15e-6, 1 / 12e9),
}


def server_elements(n_cores: int = 16) -> list[ProcessingElement]:
    """`n_cores` single-core elements and one GPU driven by core `n_cores`."""
    cpus = [ProcessingElement(f"cpu{i}", "cpu", (i,), cluster="xeon", power_w=6.0)
            for i in range(n_cores)]
    gpu = ProcessingElement("gpu0", "gpu", (n_cores,), device_index=0, model="synthetic-gpu",
                            power_w=300.0)
    return [*cpus, gpu]


def synthetic_problem(model: str, n_cores: int = 16, gpu_speedup: float = GPU_SPEEDUP,
                      fuse: bool = True) -> Problem:
    graph = resolve_model(model, fuse=fuse)
    elements = server_elements(n_cores)
    cpu = np.array([(l.flops or 0) / CPU_FLOPS + LAYER_OVERHEAD for l in graph.layers])
    times = np.column_stack([cpu if e.kind == "cpu" else cpu / gpu_speedup for e in elements])
    kind = {e.name: e.kind for e in elements}

    def transfer(nbytes: int, src: str, dst: str) -> float:
        if src == dst:
            return 0.0
        a, b = LINKS["cpu-gpu" if "gpu" in (kind[src], kind[dst]) else "cpu-cpu"]
        return a + nbytes * b

    return Problem(graph, elements, times, transfer)


def bench(models: list[str], strategies: list[str], options: dict[str, dict[str, Any]] | None
          = None, seed: int = 0, out=print, n_cores: int = 16) -> list[dict[str, Any]]:
    """Run every strategy on every model; returns rows (and prints them as they come)."""
    options = options or {}
    rows = []
    for model in models:
        problem = synthetic_problem(model, n_cores)
        for name in strategies:
            label = name.partition("@")[0]
            opts = options.get(name, {})
            limit = MAX_LAYERS.get(label)
            if limit is not None and len(problem.graph.layers) > limit:
                out(f"{model:14s} {len(problem.graph.layers):4d} layers  {name:22s} "
                    f"skipped (more than {limit} layers)")
                continue
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                res = get_strategy(label)(problem, seed=seed, **opts)
            except InputError as err:  # e.g. exhaustive on more than 4 elements
                out(f"{model:14s} {len(problem.graph.layers):4d} layers  {name:22s} "
                    f"skipped ({err})")
                continue
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            row = {"model": model, "layers": len(problem.graph.layers), "strategy": name,
                   "fps": res.metrics.throughput, "latency_ms": res.metrics.latency * 1e3,
                   "actors": len(res.best.actors), "seconds": seconds, "cpu_seconds": cpu,
                   "evaluations": res.evaluations}
            for key in ("status", "objective_us", "returned", "ga_best_throughput"):
                if key in res.notes:
                    row[key] = res.notes[key]
            rows.append(row)
            extra = ", ".join(f"{k}={row[k]}" for k in ("status", "returned") if k in row)
            if "ga_best_throughput" in row:  # what the GA's own best chromosome predicts
                extra += f", ga's own best {row['ga_best_throughput']:.1f} fps"
            out(f"{model:14s} {len(problem.graph.layers):4d} layers  {name:22s} "
                f"{row['fps']:9.1f} fps  {seconds:7.2f} s ({cpu:6.2f} s cpu)  "
                f"{row['actors']:3d} actors  {extra}")
    return rows


MAX_LAYERS = {"ilp": 60, "exhaustive": 12}  # beyond these the strategy is not meant to run
DEFAULT_MODELS = ["densenet121", "resnet18", "squeezenet1_0", "mobilenet_v1", "tiny_yolo_v2"]
DEFAULT_STRATEGIES = ["greedy", "pipeline", "ga", "ga@throughput", "ilp"]
# analysed fitness costs 2-100 ms a mapping on these models: a small budget
DEFAULT_OPTIONS = {"ga@throughput": {"fitness": "throughput", "pop_size": 24, "epochs": 30,
                                     "stall": 8}}


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m hetflow.bench.search_bench",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", metavar="MODEL|STRATEGY",
                    help=f"models (default {' '.join(DEFAULT_MODELS)}) and strategies, "
                         f"STRATEGY[@fitness] (default {' '.join(DEFAULT_STRATEGIES)})")
    names = ap.parse_args(sys.argv[1:] if argv is None else argv).names
    models = [a for a in names if "@" not in a and not _is_strategy(a)] or DEFAULT_MODELS
    strategies = [a for a in names if _is_strategy(a)] or DEFAULT_STRATEGIES
    bench(models, strategies, DEFAULT_OPTIONS)


def _is_strategy(name: str) -> bool:
    from hetflow.mapping.strategies.base import REGISTRY

    return name.partition("@")[0] in REGISTRY


if __name__ == "__main__":
    from .script import run_script

    run_script(main, "python -m hetflow.bench.search_bench")
