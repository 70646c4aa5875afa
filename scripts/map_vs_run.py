"""What `hetflow map` predicts, from the profile alone, against a run of the plan it makes.

For each MODEL: the profile as `hetflow profile` makes it (measured here), each STRATEGY's plan
searched with the profile's contention (the slowdown it measured with a copy on every single
core at once, `calibration["busy_fps"]`: what `hetflow map` uses), run through the engine once
(outputs checked), and its prediction over the measured rate, beside the same plan predicted
without that contention (as `hetflow map` predicted before). No pilots, no re-timing: the
prediction a user of `map` sees.

    python scripts/map_vs_run.py [--strategies pipeline,single] [--seconds 2] MODEL ...
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from hetflow.bench.core import profiled_elements
from hetflow.mapping.from_profile import problem_from_profile
from hetflow.mapping.mapping import describe_design
from hetflow.mapping.planner import search_plan
from hetflow.mapping.problem import evaluate
from hetflow.model import resolve_model
from hetflow.platform.detect import detect_platform
from hetflow.profile import profile_model
from hetflow.runtime.api import run_plan
from hetflow.runtime.pilot import frames_for


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--strategies", default="pipeline,single")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    platform = detect_platform()
    rows = []
    for model in a.models:
        graph = resolve_model(model, fuse=True)
        print(f"{model}: profiling", file=sys.stderr, flush=True)
        prof = profile_model(graph, platform, elements=profiled_elements(platform), repeats=10,
                             progress=False)
        for strategy in a.strategies.split(","):
            plan = search_plan(problem_from_profile(graph, prof, platform, 2, contention=True),
                               strategy, platform.name, fuse=True)[0]
            without = evaluate(problem_from_profile(graph, prof, platform, 2), plan.mapping)
            frames = frames_for(plan, a.seconds, 100)
            r = run_plan(plan, graph, frames, max(10, frames // 10), check="first")
            row = {"model": graph.name, "strategy": strategy,
                   "design": describe_design(plan.app.phases, plan.mapping.lanes),
                   "measured": r.throughput, "checked_frames": r.checked_frames,
                   "predicted": plan.predicted["throughput"],
                   "predicted_without": without.throughput}
            rows.append(row)
            print(f"{row['model']:14} {strategy:9} measured {row['measured']:8.1f}  predicted "
                  f"{row['predicted']:8.1f} ({row['predicted'] / row['measured']:.2f})  without "
                  f"contention {row['predicted_without']:8.1f} "
                  f"({row['predicted_without'] / row['measured']:.2f})  {row['design']}",
                  flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"command": "python scripts/map_vs_run.py " + " ".join(sys.argv[1:]),
                       "cores": len(os.sched_getaffinity(0)), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
