"""Firings as the engine makes them when frames go back and forth between two elements, against
the firings the profile times.

The model's layers are cut as `interleave_bench --measure --every N` cuts them (every Nth layer
on the second element, runs of the others on the first), and each element's phases are timed
as the runtime calls them (`runner.run`, host arrays in and out):
  loop   - each phase many times in a row (as a profile times a stage);
  turn   - the element's phases one after another, each once a round (the others' weights and
           activations pass through the caches in between);
  waited - the same, each firing after the thread waited WAIT ms on an event (as a stage
           waits for its input from the other element).
Per element: the three sums of the phases' medians per frame, and per firing what `turn` and
`waited` add to `loop`. `--relu`: as many one-ReLU sub-networks (4,096 floats) instead of the
phases, each its own session: what a switch of session costs without the layers' weights.

    python scripts/wake_probe.py [--every 4] [--wait 0.3] [--relu] [--elements gpu0,cpu0] MODEL ...
"""
from __future__ import annotations

import argparse
import json
import os
import threading
import time

import numpy as np

from hetflow.backends import pin_current_thread
from hetflow.backends.reuse import release, runners_for
from hetflow.model import resolve_model
from hetflow.platform import resolve_platform
from hetflow.profile.measure import random_feeds


def phases(layers: list[str], every: int) -> tuple[list[list[str]], list[list[str]]]:
    """(runs of layers on the first element, layers on the second), in model order."""
    first, second, run = [], [], []
    for i, name in enumerate(layers):
        if i % every == every - 1:
            if run:
                first.append(run)
                run = []
            second.append([name])
        else:
            run.append(name)
    if run:
        first.append(run)
    return first, second


def probe(graph, element, groups: list[list[str]], rounds: int, wait_s: float,
          relu: bool = False) -> dict:
    if relu:
        from hetflow.backends import backend_for
        from hetflow.profile.measure import relu_subnet

        runners = [backend_for(element).prepare(relu_subnet(f"relu{i}", 4096), element)
                   for i in range(len(groups))]
    else:
        runners = [runners_for(graph, g, element)[0] for g in groups]
    try:
        pin_current_thread(runners[0].caller_cores or element.cores)
        feeds = [{"x": np.zeros((1, 4096), np.float32)} if relu else
                 random_feeds(graph, r.inputs) for r in runners]
        loop = []
        for r, x in zip(runners, feeds):
            for _ in range(3):
                r.run(x)
            ts = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                r.run(x)
                ts.append(time.perf_counter() - t0)
            loop.append(float(np.median(ts)))
        event = threading.Event()
        out = {"loop": loop}
        for mode in ("turn", "waited"):
            ts = [[] for _ in runners]
            for it in range(rounds + 2):
                for i, (r, x) in enumerate(zip(runners, feeds)):
                    if mode == "waited":
                        event.wait(wait_s)
                    t0 = time.perf_counter()
                    r.run(x)
                    if it >= 2:
                        ts[i].append(time.perf_counter() - t0)
            out[mode] = [float(np.median(t)) for t in ts]
        n = len(runners)
        return {"element": element.name, "phases": n,
                **{f"{k}_ms_per_frame": 1e3 * sum(v) for k, v in out.items()},
                "turn_us_per_firing": 1e6 * (sum(out["turn"]) - sum(loop)) / n,
                "waited_us_per_firing": 1e6 * (sum(out["waited"]) - sum(loop)) / n}
    finally:
        release(runners)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--every", type=int, default=4)
    ap.add_argument("--wait", type=float, default=0.3, help="ms a firing waits before it")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--elements", default="gpu0,cpu0")
    ap.add_argument("--relu", action="store_true", help="one-ReLU sessions, not the phases")
    ap.add_argument("--json")
    a = ap.parse_args()
    plat = resolve_platform("auto", check_devices=True)
    by_name = {e.name: e for e in plat.all_elements()}
    first, second = (by_name[n] for n in a.elements.split(","))
    rows = []
    for model in a.models:
        graph = resolve_model(model, fuse=True)
        on_first, on_second = phases([l.name for l in graph.layers], a.every)
        for element, groups in ((first, on_first), (second, on_second)):
            row = {"model": graph.name + (" (ReLUs)" if a.relu else ""),
                   **probe(graph, element, groups, a.rounds, a.wait / 1e3, a.relu)}
            rows.append(row)
            print(f"{row['model']:14} {row['element']:6} {row['phases']:3} phases: per frame "
                  f"loop {row['loop_ms_per_frame']:.2f} ms, in turn {row['turn_ms_per_frame']:.2f}"
                  f", in turn after a wait {row['waited_ms_per_frame']:.2f}; per firing +"
                  f"{row['turn_us_per_firing']:.0f} us in turn, +{row['waited_us_per_firing']:.0f}"
                  f" us after a wait", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"command": "python scripts/wake_probe.py " + " ".join(
                os.sys.argv[1:]), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
