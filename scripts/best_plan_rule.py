"""Replay the bench's choice of its best throughput plan (`bench.core.best_throughput_row`) on
archived runs: for each model, which plan it takes, the balanced design's pilot over the
throughput plan's, and what each plan ran head to head (where the run measured it).
Usage: python scripts/best_plan_rule.py FIRST LAST   (run numbers in docs/results/lanes_h100)"""
import json
import math
import sys
from pathlib import Path

from hetflow.bench.core import best_throughput_row, pilot_rate, run_label

ROOT = Path(__file__).resolve().parent.parent / "docs" / "results" / "lanes_h100"


def main() -> None:
    first, last = int(sys.argv[1]), int(sys.argv[2])
    print(f"{'run':>5} {'model':16} {'rule takes':10} {'bal/best pilot':>14} "
          f"{'h2h best':>9} {'h2h balanced':>12}")
    fired = 0
    for run in range(first, last + 1):
        path = ROOT / f"run{run}" / "bench.json"
        if not path.exists():
            continue
        for m in json.loads(path.read_text())["models"]:
            plans = [r for r in m["rows"] if r.get("kind") == "plan" and not r.get("infeasible")]
            bal = next((r for r in plans if r["name"] == "hetflow balanced"), None)
            if not plans or bal is None:
                continue
            took = best_throughput_row(plans)
            others = [r for r in plans if r is not bal]
            best = max(others, key=lambda r: r["throughput"]) if others else bal
            ours, theirs = pilot_rate(best), pilot_rate(bal)
            ratio = theirs / ours if ours and theirs and run_label(bal) != run_label(best) \
                else math.nan
            h = m["notes"].get("head_to_head") or {}
            hb = m["notes"].get("head_to_head_balanced") or {}
            fired += took is bal
            print(f"{run:>5} {m['model']:16} {took['name'].removeprefix('hetflow '):10} "
                  f"{ratio:>14.3f} {h.get('ratio', math.nan):>9.3f} "
                  f"{hb.get('ratio', math.nan):>12.3f}")
    print(f"the balanced plan taken as the best throughput plan in {fired} model-runs")


if __name__ == "__main__":
    main()
