"""How far one machine agrees with itself: each saved plan run REPEATS times back to back, as
long as the bench runs a plan (`plan_seconds`, at least `frames`), in one process with its
runners kept. For each plan: the runs' frames/s, the largest over the smallest, how often two
consecutive runs differ by more than 10%, and the most runs that any one figure is within 10%
of (pred/meas in [0.9, 1.1]): an upper bound on how often a prediction made before a run, of
whatever kind, can be within 10% of a run on this machine.
Usage: python scripts/vm_repeatability.py OUT.json REPEATS PLAN.json [PLAN.json ...]"""
import json
import platform
import sys
import time

from hetflow.backends.reuse import reusing_runners
from hetflow.bench.core import BenchSettings
from hetflow.mapping.mapping import describe_design
from hetflow.mapping.plan import Plan
from hetflow.runtime.api import load_plan_model, run_plan
from hetflow.runtime.pilot import frames_for

WITHIN = 0.10


def best_share(rates: list[float]) -> float:
    """The largest share of `rates` that one figure p is within WITHIN of (|p / r - 1| <= WITHIN):
    p is best placed at an end of some run's interval [0.9 r, 1.1 r]."""
    ends = [r * (1 + s * WITHIN) for r in rates for s in (-1, 1)]
    return max(sum(abs(p / r - 1) <= WITHIN + 1e-12 for r in rates) for p in ends) / len(rates)


def main(out: str, repeats: int, paths: list[str]) -> None:
    settings = BenchSettings()
    plans = [(p, Plan.load(p)) for p in paths]
    rows = []
    with reusing_runners():
        graphs = {p: load_plan_model(plan) for p, plan in plans}
        runs: dict[str, list[float]] = {p: [] for p, _ in plans}
        for i in range(repeats):  # the plans in turn, so that a slow minute hits them all
            for p, plan in plans:
                frames = frames_for(plan, settings.plan_seconds, settings.frames)
                r = run_plan(plan, graphs[p], frames, max(settings.warmup, frames // 10),
                             check="none")
                runs[p].append(r.throughput)
                print(f"[{time.strftime('%H:%M:%S')}] {i + 1}/{repeats} {p}: "
                      f"{r.throughput:.1f} frames/s", flush=True)
    for p, plan in plans:
        rates = runs[p]
        steps = [abs(b / a - 1) > WITHIN for a, b in zip(rates, rates[1:])]
        rows.append({"plan": p, "model": plan.model_name,
                     "design": describe_design(plan.app.phases, plan.mapping.lanes),
                     "runs": [round(r, 2) for r in rates],
                     "max_over_min": max(rates) / min(rates),
                     "consecutive_over_10pct": sum(steps) / len(steps) if steps else 0.0,
                     "best_share_within_10pct": best_share(rates)})
    bound = sum(r["best_share_within_10pct"] for r in rows) / len(rows)
    print("| model | design | runs frames/s | max/min | consecutive >10% | best share within 10% |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['model']} | {r['design']} | {', '.join(f'{x:.1f}' for x in r['runs'])} | "
              f"{r['max_over_min']:.2f} | {r['consecutive_over_10pct']:.0%} | "
              f"{r['best_share_within_10pct']:.0%} |")
    print(f"mean best share within 10%: {bound:.0%}")
    with open(out, "w") as f:
        json.dump({"command": " ".join(sys.argv), "host": platform.node(),
                   "plan_seconds": settings.plan_seconds, "rows": rows,
                   "mean_best_share_within_10pct": bound}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
