"""Speed of the foundation, as the issue asks: `hetflow inspect densenet121` and the CSDF
conversion + throughput analysis of densenet121 mapped on 17 elements.

    python -m hetflow.bench.foundation_bench [--repeats 5]
"""
from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from hetflow.dataflow.analysis import latency, throughput_mcr
    from hetflow.dataflow.csdf import cnn_to_csdf
    from hetflow.model import resolve_model
    from hetflow.model.zoo import cached_model_path

    cached_model_path("densenet121")  # build the zoo file once, outside the timing
    inspect_s = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "hetflow", "inspect", "densenet121", "--json"],
                       check=True, stdout=subprocess.DEVNULL)
        inspect_s.append(time.perf_counter() - t0)
    graph = resolve_model("densenet121")
    elements = [f"cpu{i}" for i in range(16)] + ["gpu0"]
    rows = []
    for kind in ("random", "contiguous"):
        times = []
        for r in range(args.repeats):
            rng = random.Random(r)
            n = len(graph.layers)
            assignment = ({l.name: rng.choice(elements) for l in graph.layers} if kind == "random"
                          else {l.name: elements[i * 17 // n] for i, l in enumerate(graph.layers)})
            t0 = time.perf_counter()
            app = cnn_to_csdf(graph, assignment)
            g = app.to_graph(lambda p: 1e-4 * len(p.layers), lambda c: 1e-9 * c.nbytes, 2)
            thr = throughput_mcr(g).throughput
            times.append(time.perf_counter() - t0)
        phases = sum(len(p) for p in app.phases.values())
        rows.append((kind, phases, statistics.median(times), max(times), thr))
    t0 = time.perf_counter()
    lat = latency(g)
    lat_s = time.perf_counter() - t0
    print(f"densenet121: {len(graph.layers)} layers")
    print(f"hetflow inspect densenet121 (whole command, new process): median "
          f"{statistics.median(inspect_s):.2f} s, max {max(inspect_s):.2f} s (target < 3 s)")
    for kind, phases, med, mx, thr in rows:
        print(f"CSDF + throughput, {kind} mapping on 17 elements ({phases} phases): median "
              f"{med:.3f} s, max {mx:.3f} s (target < 1 s); predicted {thr:.1f} frames/s")
    print(f"latency analysis of the contiguous mapping: {lat_s:.3f} s (steady {lat.steady * 1e3:.2f} ms)")


if __name__ == "__main__":
    from .script import run_script

    run_script(main, "python -m hetflow.bench.foundation_bench")
