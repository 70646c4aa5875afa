"""GPU elements in a process of their own or in the engine's process, measured (GPU machine).

Each saved plan runs through `run_plan` alternately with `isolate="none"` (every element a
thread of one process) and `isolate="gpu"` (each GPU element's lanes in a process of their
own), REPEATS times each, frames checked against the reference; prints frames/s of each run and
the medians, and writes isolate_check.json under $OUT.
Usage: python scripts/isolate_check.py PLAN.json ... [--repeats R] [--seconds S]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics

from hetflow.mapping.plan import Plan
from hetflow.runtime.api import load_plan_model, run_plan


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("plans", nargs="+")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args()
    out = os.environ.get("OUT", ".")
    os.makedirs(out, exist_ok=True)
    rows = []
    for path in a.plans:
        plan = Plan.load(path)
        graph = load_plan_model(plan, plan.model_name)  # the zoo name: caches move
        rate = float(plan.predicted.get("throughput") or 1000.0)
        frames = int(min(8000, max(500, a.seconds * rate)))
        runs: dict[str, list[float]] = {"none": [], "gpu": []}
        for _ in range(a.repeats):
            for mode in runs:
                r = run_plan(plan, graph, frames, frames // 10, check="first", isolate=mode)
                assert r.checked_frames and r.max_abs_error < 1e-3, r.max_abs_error
                runs[mode].append(round(r.throughput, 1))
                print(f"{path} isolate={mode}: {r.throughput:.0f} frames/s "
                      f"(p50 {1e3 * r.latency['p50']:.1f} ms)", flush=True)
        row = {"plan": path, "model": plan.model_name, "frames": frames, "runs": runs,
               "threads_fps": statistics.median(runs["none"]),
               "isolated_fps": statistics.median(runs["gpu"])}
        row["isolated_over_threads"] = row["isolated_fps"] / row["threads_fps"]
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(os.path.join(out, "isolate_check.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
