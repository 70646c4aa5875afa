"""A design run by hetflow's engine against the parallel copies run side by side with no engine
(`measure_parallel`: the whole model on every element of the finest configuration, the GPU at
LANES lanes), alternately, REPEATS times each (medians), in one process, outputs checked
(`hetflow.bench.head_to_head`, which `hetflow bench --head-to-head N` runs on its best plan).

For a MODEL the design is the parallel copies' own (dynamic dispatch, outputs released in
order): the engine's cost. For a PLAN file (`*.plan.json`, e.g. a bench's chosen plan) it is
that plan: how it compares with the parallel baseline when both are measured minutes, not
seconds, apart is what a single bench cannot say on a machine that drifts by 5-10%.
Usage: python scripts/engine_vs_copies.py [--lanes K] [--seconds S] [--repeats R] MODEL|PLAN ..."""
from __future__ import annotations

import argparse
import json
import os

from hetflow.bench.core import baseline_elements
from hetflow.bench.head_to_head import head_to_head
from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.mapping.mapping import Mapping, describe_design, group_name
from hetflow.mapping.plan import Plan
from hetflow.model import resolve_model
from hetflow.platform import resolve_platform
from hetflow.runtime.api import load_plan_model
from hetflow.runtime.inputs import random_source


def whole_model_plan(graph, platform_name: str, els: list, lanes: dict[str, int]) -> Plan:
    """The whole model on every element of `els` (the GPUs at `lanes`), frames dispatched to
    whichever member is free: the parallel copies' design, as the engine runs it. No
    prediction: a head to head runs it as long as the copies' rate."""
    actor = group_name([e.name for e in els])
    mapping = Mapping({l.name: actor for l in graph.layers}, "maximal", lanes=lanes)
    app = cnn_to_csdf(graph, mapping.assignment, "maximal")
    return Plan(graph.name, graph.model_hash, graph.source, platform_name, mapping, app,
                {e.name: e for e in els}, 2, {"throughput": 0.0}, "copies", fuse=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+", help="zoo model names or *.plan.json files")
    ap.add_argument("--lanes", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    plat = resolve_platform("auto", check_devices=True)
    _, els = baseline_elements(plat)  # the parallel copies' elements
    lanes = {e.name: a.lanes for e in els if e.kind == "gpu"}
    gpus = set(lanes)
    rows = []
    path = os.path.join(os.environ.get("OUT", "."), "engine_vs_copies.json")
    for name in a.models:
        if name.endswith(".plan.json"):
            plan = Plan.load(name)
            graph = load_plan_model(plan, plan.model_name)
        else:
            graph = resolve_model(name, fuse=True)
            plan = whole_model_plan(graph, plat.name, els, lanes)
        h = head_to_head(plan, graph, els, lanes, random_source(graph), a.repeats, a.seconds,
                         check="first")
        row = {"model": graph.name, "design": describe_design(plan.app.phases, plan.mapping.lanes),
               "plan": name if name.endswith(".plan.json") else None,
               "engine_fps": h["plan_fps"], "copies_fps": h["copies_fps"],
               "engine_runs": h["plan_runs"], "copies_runs": h["copies_runs"], "lanes": lanes,
               "elements": len(els), "ratio": h["ratio"],
               "engine_per_element_fps": h["plan_per_element_fps"],
               "copies_per_element_fps": h["copies_per_element_fps"]}
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(path, "w") as f:  # after every model: a time limit keeps what was measured
            json.dump(rows, f, indent=1)
    print(f"{'model':16} {'engine fps':>11} {'copies fps':>11} {'ratio':>6} "
          f"{'GPUs: engine':>13} {'copies':>8} {'CPUs: engine':>13} {'copies':>8}  design")
    for r in rows:
        split = [sum(v for el, v in r[side].items() if (el in gpus) == on_gpu)
                 for on_gpu in (True, False)
                 for side in ("engine_per_element_fps", "copies_per_element_fps")]
        print(f"{r['model']:16} {r['engine_fps']:>11.1f} {r['copies_fps']:>11.1f} "
              f"{r['ratio']:>6.3f} {split[0]:>13.1f} {split[1]:>8.1f} {split[2]:>13.1f} "
              f"{split[3]:>8.1f}  {r['design']}")


if __name__ == "__main__":
    from hetflow.backends.reuse import reusing_runners

    # the copies and the engine take the same runners, built once (built per run, alexnet's
    # sixteen elements and eight lanes took the whole of a 90 s limit before its first row)
    with reusing_runners():
        main()
