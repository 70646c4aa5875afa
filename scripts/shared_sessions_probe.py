"""Single cores sharing one ONNX Runtime session against one session each: the time to build
the copies of the whole model on every single core of the finest configuration, then their
throughput side by side (`measure_parallel`, CPU copies only), alternately, REPEATS times each
(medians), in one process. Writes $OUT/shared_sessions.json (default: here).
Usage: python scripts/shared_sessions_probe.py [--seconds S] [--repeats R] MODEL ..."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from hetflow.backends.reuse import release, reusing_runners, runners_for_many
from hetflow.model import resolve_model
from hetflow.platform import resolve_platform
from hetflow.platform.configs import finest_config
from hetflow.runtime.baselines import measure_parallel
from hetflow.runtime.inputs import random_source


def built_in(graph, els) -> tuple[float, list]:
    whole = [l.name for l in graph.layers]
    t0 = time.perf_counter()
    got = runners_for_many(graph, [(whole, e, 1, None) for e in els])
    return time.perf_counter() - t0, [r for rs in got for r in rs]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    plat = resolve_platform("auto")
    finest = finest_config(plat)
    els = [e for e in finest.elements if e.kind == "cpu"]
    path = os.path.join(os.environ.get("OUT", "."), "shared_sessions.json")
    rows = []
    for name in a.models:
        graph = resolve_model(name, fuse=True)
        src = random_source(graph)
        build_own, runners = built_in(graph, els)  # outside a scope: one session each
        release(runners)
        with reusing_runners():  # inside one: the single cores share one
            build_shared, runners = built_in(graph, els)
            release(runners)
        own, shared = [], []
        for _ in range(a.repeats):
            with reusing_runners():
                shared.append(measure_parallel(graph, els, src, warmup=3,
                                               seconds=a.seconds).throughput)
            own.append(measure_parallel(graph, els, src, warmup=3, seconds=a.seconds).throughput)
        row = {"model": name, "cores": len(els), "build_own_s": build_own,
               "build_shared_s": build_shared, "own_fps": statistics.median(own),
               "shared_fps": statistics.median(shared), "own_runs": own, "shared_runs": shared}
        row["ratio"] = row["shared_fps"] / row["own_fps"]
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"{'model':16} {'build own s':>11} {'shared s':>9} {'own fps':>9} {'shared fps':>10} ratio")
    for r in rows:
        print(f"{r['model']:16} {r['build_own_s']:11.2f} {r['build_shared_s']:9.2f} "
              f"{r['own_fps']:9.1f} {r['shared_fps']:10.1f} {r['ratio']:.3f}")


if __name__ == "__main__":
    main()
