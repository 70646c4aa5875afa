"""Is a pilot's rate the plan's rate? Each PLAN file is run for a pilot's length (the bench's
`frames_for(plan, PILOT_S, 60)`, no check, as `choose_by_pilot` runs it) and for a plan run's
length (`frames_for(plan, RUN_S, 40)`, outputs checked, as the bench runs the chosen plan),
alternately, REPEATS times each, in one process (runners built once).
Usage: python scripts/pilot_vs_run.py [--pilot-s S] [--run-s S] [--repeats R] PLAN ..."""
from __future__ import annotations

import argparse
import json
import os
import statistics

from hetflow.mapping.mapping import describe_design
from hetflow.mapping.plan import Plan
from hetflow.runtime.api import load_plan_model, run_plan
from hetflow.runtime.pilot import frames_for


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("plans", nargs="+")
    ap.add_argument("--pilot-s", type=float, default=0.4)
    ap.add_argument("--run-s", type=float, default=1.5)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    rows = []
    path = os.path.join(os.environ.get("OUT", "."), "pilot_vs_run.json")
    for name in a.plans:
        plan = Plan.load(name)
        graph = load_plan_model(plan, plan.model_name)
        short, long_ = [], []
        n_short, n_long = frames_for(plan, a.pilot_s, 60), frames_for(plan, a.run_s, 40)
        for _ in range(a.repeats):
            short.append(run_plan(plan, graph, n_short, max(10, n_short // 10),
                                  check="none").throughput)
            r = run_plan(plan, graph, n_long, max(5, n_long // 10), check="first")
            assert r.checked_frames and r.max_abs_error < 1e-3, r.max_abs_error
            long_.append(r.throughput)
        row = {"plan": name, "model": graph.name,
               "design": describe_design(plan.app.phases, plan.mapping.lanes),
               "pilot_frames": n_short, "run_frames": n_long, "pilot_runs": short,
               "plan_runs": long_, "pilot_fps": statistics.median(short),
               "run_fps": statistics.median(long_)}
        row["pilot_over_run"] = row["pilot_fps"] / row["run_fps"]
        rows.append(row)
        with open(path, "w") as f:  # after every plan: a time limit keeps what was measured
            json.dump(rows, f, indent=1)
    print(f"{'model':14} {'pilot fps':>10} {'run fps':>9} {'ratio':>6}  design")
    for r in rows:
        print(f"{r['model']:14} {r['pilot_fps']:>10.1f} {r['run_fps']:>9.1f} "
              f"{r['pilot_over_run']:>6.3f}  {r['design']}")


if __name__ == "__main__":
    from hetflow.backends.reuse import reusing_runners

    with reusing_runners():
        main()
