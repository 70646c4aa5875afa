"""Python's thread switch interval against the tail of CPU members beside a GPU's lanes.

A thread that wants the interpreter lock waits up to the switch interval (5 ms by default)
before its holder is asked to drop it; a GPU driving thread that gives the lock up and takes it
back around every CUDA call can keep a CPU member waiting that long each time its ORT run
returns. For each MODEL this runs data-parallel designs of the whole model (CPU groups of each
size in --groups, beside the GPU at --lanes lanes), by the engine against the parallel copies
(`hetflow.bench.head_to_head`, which keeps each run's p99), at each switch interval of
--intervals (0: Python's default), the intervals alternating round by round. Both sides of a
pairing run at the same interval (`HETFLOW_SWITCH_INTERVAL`, read by `runtime.harness`).
Usage: python scripts/switch_interval_probe.py [--groups 1,3] [--intervals 0,0.0002]
       [--lanes 24] [--seconds 1.5] [--rounds 4] MODEL ...
Writes $OUT/switch_interval_probe.json (or ./).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics

from engine_vs_copies import whole_model_plan

from hetflow.bench.core import baseline_elements
from hetflow.bench.head_to_head import head_to_head
from hetflow.mapping.mapping import describe_design
from hetflow.model import resolve_model
from hetflow.platform import resolve_platform
from hetflow.platform.configs import resolve_config
from hetflow.runtime.inputs import random_source


def design(graph, plat, group: int, lanes: int):
    """The whole model on every element of CPU groups of `group` cores (the last one smaller
    where they do not divide the free cores) and each GPU at `lanes` lanes, dynamic dispatch."""
    parts = {}
    for cl in plat.clusters:
        free = len(plat.free_cores(cl))
        parts[cl.name] = [group] * (free // group) + ([free % group] if free % group else [])
    els = [e for e in resolve_config(plat, parts).elements if e.backend != "none"]
    return whole_model_plan(graph, plat.name, els, {e.name: lanes for e in els if e.kind == "gpu"})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--groups", default="1,3")
    ap.add_argument("--intervals", default="0,0.0002")
    ap.add_argument("--lanes", type=int, default=24)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    plat = resolve_platform("auto", check_devices=True)
    _, copies = baseline_elements(plat)  # the parallel copies' elements
    copy_lanes = {e.name: a.lanes for e in copies if e.kind == "gpu"}
    intervals = [float(x) for x in a.intervals.split(",")]
    path = os.path.join(os.environ.get("OUT", "."), "switch_interval_probe.json")
    rows = []
    for name in a.models:
        graph = resolve_model(name, fuse=True)
        source = random_source(graph)
        plans = {g: design(graph, plat, g, a.lanes) for g in (int(x) for x in a.groups.split(","))}
        runs: dict[tuple[int, float], list[dict]] = {}
        for r in range(a.rounds):
            order = intervals if r % 2 == 0 else intervals[::-1]
            for si in order:
                if si > 0:
                    os.environ["HETFLOW_SWITCH_INTERVAL"] = str(si)
                else:
                    os.environ.pop("HETFLOW_SWITCH_INTERVAL", None)
                for g, plan in plans.items():
                    h = head_to_head(plan, graph, copies, copy_lanes, source, 1, a.seconds,
                                     check="first" if r == 0 else "none")
                    runs.setdefault((g, si), []).append(h)
                    print(json.dumps({"model": name, "group": g, "interval": si, "round": r,
                                      "engine_fps": h["plan_fps"], "copies_fps": h["copies_fps"],
                                      "engine_p99_ms": h["plan_p99"] * 1e3,
                                      "copies_p99_ms": h["copies_p99"] * 1e3}), flush=True)
        os.environ.pop("HETFLOW_SWITCH_INTERVAL", None)
        for (g, si), hs in runs.items():
            med = lambda k: statistics.median(h[k] for h in hs)  # noqa: E731
            rows.append({"model": name, "design": describe_design(plans[g].app.phases,
                                                                  plans[g].mapping.lanes),
                         "group": g, "interval": si, "rounds": len(hs),
                         "engine_fps": med("plan_fps"), "copies_fps": med("copies_fps"),
                         "engine_p99_ms": med("plan_p99") * 1e3,
                         "copies_p99_ms": med("copies_p99") * 1e3,
                         "engine_runs": [(h["plan_fps"], h["plan_p99"]) for h in hs],
                         "copies_runs": [(h["copies_fps"], h["copies_p99"]) for h in hs]})
        with open(path, "w") as f:  # after every model: a time limit keeps what was measured
            json.dump(rows, f, indent=1)
    print(f"{'model':14} {'group':>5} {'interval':>9} {'engine fps':>10} {'copies fps':>10} "
          f"{'ratio':>6} {'engine p99':>10} {'copies p99':>10} {'p99 ratio':>9}")
    for r in rows:
        print(f"{r['model']:14} {r['group']:>5} {r['interval'] or 'default':>9} "
              f"{r['engine_fps']:>10.1f} {r['copies_fps']:>10.1f} "
              f"{r['engine_fps'] / r['copies_fps']:>6.3f} {r['engine_p99_ms']:>10.2f} "
              f"{r['copies_p99_ms']:>10.2f} {r['engine_p99_ms'] / r['copies_p99_ms']:>9.2f}")


if __name__ == "__main__":
    from hetflow.backends.reuse import reusing_runners

    with reusing_runners():
        main()
