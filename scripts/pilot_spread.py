"""How far a pilot's reading moves to its design's full run, over archived GPU-machine benches:
for each plan a bench ran, log(full run / pilot) of its chosen design's throughput and p99
(one sample per bench, model and design: plan kinds that chose one design share its run).
Their mean and spread are the noise model of `runtime.pilot` (RATE_DRIFT and the rest).
Usage: python scripts/pilot_spread.py FIRST_RUN LAST_RUN [docs/results/lanes_h100]
"""
from __future__ import annotations

import glob
import json
import math
import re
import statistics
import sys


def archived_models(first: int, last: int, folder: str):
    """(run, one model's bench result) of the archived runs first..last, in run order."""
    paths = {int(re.search(r"run(\d+)", p).group(1)): p
             for p in glob.glob(f"{folder}/run*/bench.json")}
    for run in sorted(r for r in paths if first <= r <= last):
        with open(paths[run]) as fh:
            bench = json.load(fh)
        for model in bench.get("models", []):
            yield run, model


def samples(first: int, last: int, folder: str) -> list[tuple[float, float]]:
    seen, out = set(), []
    for run, model in archived_models(first, last, folder):
        for row in model["rows"]:
            chosen = [p for p in row.get("pilots") or ()
                      if p.get("chosen") and "pilot_throughput" in p]
            if row.get("kind") != "plan" or not chosen or not row.get("throughput"):
                continue
            p = chosen[0]
            key = (run, model["model"], p.get("design") or " + ".join(p["stages"]))
            if key in seen:
                continue
            seen.add(key)
            out.append((math.log(row["throughput"] / p["pilot_throughput"]),
                        math.log(row["latency_p99"] / p["pilot_latency_p99"])))
    return out


def main(first: int, last: int, folder: str = "docs/results/lanes_h100") -> None:
    got = samples(first, last, folder)
    rate, p99 = [r for r, _ in got], [p for _, p in got]
    print(json.dumps({"runs": [first, last], "samples": len(got),
                      "log_rate_mean": round(statistics.mean(rate), 4),
                      "log_rate_sd": round(statistics.pstdev(rate), 4),
                      "log_p99_mean": round(statistics.mean(p99), 4),
                      "log_p99_sd": round(statistics.pstdev(p99), 4)}))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:4])
