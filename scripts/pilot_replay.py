"""The archived balanced pilots of GPU-machine benches, chosen again by today's rule
(`runtime.pilot._pick` under the bench's rate floor and latency cap), beside the choice
recorded then, and whether each choice's full run kept both where the bench ran that design in
full (any plan kind's run of it).
Usage: python scripts/pilot_replay.py FIRST_RUN LAST_RUN [docs/results/lanes_h100]
"""
from __future__ import annotations

import json
import sys

from hetflow.bench.core import BenchSettings
from hetflow.runtime.pilot import _pick
from pilot_spread import archived_models


def outcome(full: dict, design: str, floor: float, cap: float) -> str:
    got = full.get(design)
    if got is None:
        return "?"
    return "kept" if got[0] >= floor and got[1] <= cap else "missed"


def main(first: int, last: int, folder: str = "docs/results/lanes_h100") -> None:
    s = BenchSettings()
    counts = {"same": 0, "changed": 0}
    for run, model in archived_models(first, last, folder):
        rows = {r["name"]: r for r in model["rows"]}
        par = next((r for n, r in rows.items() if n.startswith("parallel copies")), None)
        bal = rows.get("hetflow balanced") or {}
        tried = bal.get("pilots") or []
        ran = [i for i, t in enumerate(tried) if "pilot_throughput" in t]
        recorded = [i for i, t in enumerate(tried) if t.get("chosen")]
        if par is None or len(ran) < 2 or not recorded:
            continue
        floor = s.balanced_rate_share * par["throughput"]
        cap = s.balanced_latency_share * par["latency_p99"]
        now = _pick(tried, ran, cap, None, floor)
        full = {r["design"]: (r["throughput"], r["latency_p99"]) for r in rows.values()
                if r.get("kind") == "plan" and r.get("design")}
        then, new = tried[recorded[0]]["design"], tried[now]["design"]
        counts["same" if new == then else "changed"] += 1
        print(f"run {run:3d} {model['model']:16s} then {then:45.45s} "
              f"{outcome(full, then, floor, cap):6s}"
              + ("  now the same" if new == then else
                 f"  now {new:45.45s} {outcome(full, new, floor, cap)}"))
    print(json.dumps(counts))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:4])
