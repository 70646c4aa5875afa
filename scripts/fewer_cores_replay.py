"""How the throughput plans that the bench ran head to head fared, by how the pilots chose them:
the parallel copies' own design kept, a design on fewer cores taking the place of a faster pilot
(the rule `runtime.pilot` had until it was dropped), or another design. Reads the archived
benches (docs/results/lanes_h100/runNN/bench.json) and any bench.json given.
Usage: python scripts/fewer_cores_replay.py FIRST LAST [BENCH.json ...]
"""
from __future__ import annotations

import json
import statistics
import sys

from pilot_spread import archived_models

FOLDER = "docs/results/lanes_h100"


def is_copies(design: str) -> bool:
    """The parallel copies' design: one stage, every member a single core or a GPU."""
    members = design.split(" x")[0].split("|")
    return "+" not in design and len(members) > 2 and all(
        m.startswith("gpu") or (m.startswith("cpu") and "-" not in m) for m in members)


def how_chosen(row: dict) -> str | None:
    pilots = [p for p in row.get("pilots") or () if "pilot_throughput" in p]
    chosen = [p for p in pilots if p.get("chosen")]
    if not chosen:
        return None
    pick, top = chosen[0], max(pilots, key=lambda p: p["pilot_throughput"])
    if pick is not top and (pick.get("cores") or 0) < (top.get("cores") or 0):
        return "fewer cores than a faster pilot"
    return "the copies' design" if is_copies(pick["design"]) else "another design"


def main(first: int, last: int, extra: list[str]) -> None:
    models = list(archived_models(first, last, FOLDER))
    for path in extra:
        with open(path) as fh:
            models += [(path, m) for m in json.load(fh).get("models", [])]
    kinds: dict[str, list[tuple]] = {}
    for run, model in models:
        h = model["notes"].get("head_to_head")
        if not h:
            continue
        row = next((r for r in model["rows"] if r["name"] == f"hetflow {h['plan']}"), None)
        if row is not None and row.get("run_of"):  # its run is another kind's
            row = next(r for r in model["rows"] if r["name"] == f"hetflow {row['run_of']}")
        kind = how_chosen(row) if row else None
        if kind:
            kinds.setdefault(kind, []).append((run, model["model"], h["ratio"]))
    for kind, cases in kinds.items():
        ratios = [r for *_, r in cases]
        print(f"{kind}: {len(cases)} head to heads, median {statistics.median(ratios):.3f}, "
              f"{sum(r < 1.0 for r in ratios)} below 1.0: "
              + ", ".join(f"{run} {m} {r:.3f}" for run, m, r in cases))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])
