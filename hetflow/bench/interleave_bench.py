"""Frame-interleaved firing orders on branchy CNNs under a GPU + 16-core profile.

The profile is search_bench's synthetic one (estimated, not measured). For each model the greedy
strategy's mapping (which sends frames GPU -> CPU -> GPU on these models) is analysed with each
element's phases in frame order and with the best interleaved orders (analysis/interleave.py),
and compared with its load bounds: the largest element load (its phases' times per frame), and
that load plus the transfers in and out of the element.

    python -m hetflow.bench.interleave_bench [MODEL ...]

Each model runs with the GPU 20x a core (search_bench's default) and 5x a core (where the greedy
mapping puts more on the cores).

    python -m hetflow.bench.interleave_bench --measure [--every 4] [--seconds 8] [MODEL ...]

measures instead, on this machine: the model profiled on two of its elements (the first two
single-core CPUs, or --elements A,B; the profile is bench's, cached), every `--every`-th layer on
the second and the rest on the first, so each frame leaves the first element and comes back;
the plan made frame by frame, with offsets one frame a round, and with rounds of two frames,
each predicted before it runs (from the profile and the parallel copies' contention, as
`hetflow bench` predicts), then run through the engine with outputs checked; `chosen` marks
the one `make_plan` picks.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from hetflow.dataflow.analysis.interleave import best_interleaving
from hetflow.errors import InputError
from hetflow.mapping.mapping import Mapping
from hetflow.mapping.problem import build_app, timed_graph
from hetflow.mapping.strategies.base import get_strategy

from .search_bench import synthetic_problem

DEFAULT_MODELS = ["googlenet", "densenet121", "squeezenet1_0"]


def load_bounds(g) -> tuple[float, float]:
    """(largest element load, largest element load plus its channels' transfer times)."""
    load = {a.name: sum(a.exec_times) for a in g.actors}
    with_transfers = dict(load)
    for c in g.channels:
        if c.src != c.dst:
            with_transfers[c.src] += c.transfer_time
            with_transfers[c.dst] += c.transfer_time
    return max(load.values()), max(with_transfers.values())


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--measure" in argv:
        return measure_main(argv)
    import argparse

    ap = argparse.ArgumentParser(prog="python -m hetflow.bench.interleave_bench",
                                 description=__doc__.split("\n\n")[0],
                                 epilog="--measure: measure instead (--measure --help)")
    ap.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    models = ap.parse_args(argv).models
    for model in models:
        for speedup in (20.0, 5.0):
            problem = synthetic_problem(model, gpu_speedup=speedup)
            greedy = get_strategy("greedy")(problem, seed=0, interleave=False).best  # frame order
            # and a mapping with many round trips: every 6th layer on a core
            layers = [l.name for l in problem.graph.layers]
            offload = Mapping({l: "cpu1" if i % 6 == 3 else "gpu0"
                               for i, l in enumerate(layers)})
            for kind, mapping in (("greedy", greedy), ("every 6th layer on cpu1", offload)):
                report(model, speedup, kind, problem, mapping)


def report(model, speedup, kind, problem, mapping) -> None:
        app = build_app(problem, mapping)
        g = timed_graph(problem, app, mapping)
        t0 = time.perf_counter()
        best = best_interleaving(g)
        seconds = time.perf_counter() - t0
        load, with_transfers = load_bounds(g)
        phases = {a: len(ps) for a, ps in app.phases.items()}
        ahead = max((f.frame_offset for o in best.orders.values() for f in o), default=0)
        print(f"{model:14s} GPU {speedup:.0f}x a core, {kind}: phases {phases}")
        print(f"{'':14s} period in frame order {best.plain.period * 1e3:8.3f} ms, interleaved "
              f"{best.result.period * 1e3:8.3f} ms (search {seconds:.2f} s, up to {ahead} frames "
              f"ahead); load bound {load * 1e3:.3f} ms, with transfers "
              f"{with_transfers * 1e3:.3f} ms: interleaved / load+transfers = "
              f"{best.result.period / with_transfers:.3f}, / load = {best.result.period / load:.3f}")


def measure_main(argv: list[str]) -> None:
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m hetflow.bench.interleave_bench --measure")
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--every", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--elements", default=None, help="two element names, comma-separated")
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("models", nargs="*", default=["googlenet", "resnet18", "squeezenet1_0"])
    args = ap.parse_args(argv)
    rows = [row for model in args.models for row in measure_round_trips(
        model, args.every, args.seconds, args.elements.split(",") if args.elements else None)]
    print(f"{'model':14s} {'plan':17s} {'predicted':>10s} {'measured':>10s} {'pred/meas':>9s} "
          f"{'p50 ms':>8s} {'pred lat ms':>11s} {'ahead':>5s} chosen")
    for r in rows:
        print(f"{r['model']:14s} {r['plan']:17s} {r['predicted']:10.1f} {r['measured']:10.1f} "
              f"{r['predicted'] / r['measured']:9.2f} {r['latency_p50'] * 1e3:8.1f} "
              f"{r['predicted_latency'] * 1e3:11.1f} {r['frames_ahead']:5d} "
              f"{'yes' if r['chosen_by_make_plan'] else ''}")
    if args.json:
        from hetflow.io import write_json

        write_json(args.json, {"command": "python -m hetflow.bench.interleave_bench "
                               + " ".join(argv), "rows": rows})
    else:
        print(json.dumps(rows))


def measure_round_trips(model: str, every: int, seconds: float,
                        elements: list[str] | None = None) -> list[dict]:
    """The rows of one model: its round-trip mapping frame by frame, with offsets and with
    rounds of two frames, each predicted, then run with outputs checked."""
    from dataclasses import replace

    from hetflow.mapping.from_profile import problem_from_profile
    from hetflow.mapping.interleaving import choose_interleave, frames_ahead
    from hetflow.mapping.planner import make_plan
    from hetflow.mapping.problem import evaluate
    from hetflow.model import resolve_model
    from hetflow.platform.detect import detect_platform
    from hetflow.runtime.api import run_plan
    from hetflow.runtime.baselines import measure_parallel
    from hetflow.runtime.inputs import random_source

    from .core import apply_parallel_baseline, get_profile

    def log(msg: str) -> None:
        print(f"{model}: {msg}", file=sys.stderr, flush=True)

    graph = resolve_model(model, fuse=True)
    platform = detect_platform()
    prof, _ = get_profile(graph, platform, 10, log)
    problem = problem_from_profile(graph, prof, platform, 2)
    if elements is None:
        elements = [e.name for e in problem.elements if e.kind == "cpu" and len(e.cores) == 1][:2]
    if len(elements) != 2:
        raise InputError(f"--elements: need two elements, got {elements}")
    known = {e.name for e in problem.elements}
    for name in elements:
        if name not in known:
            raise InputError(f"--elements: no element {name!r} on this machine "
                             f"(known: {', '.join(sorted(known))})")
    first, second = elements
    # as the bench does before it predicts: each element's slowdown while both run copies of
    # the model (the parallel baseline), applied to the profile's times
    par = measure_parallel(graph, [problem.element(first), problem.element(second)],
                           random_source(graph), warmup=5, seconds=min(seconds, 4.0))
    factors = apply_parallel_baseline(prof, problem, par, {}, log)
    layers = [l.name for l in graph.layers]
    mapping = Mapping({l: second if i % every == every - 1 else first
                       for i, l in enumerate(layers)})
    plain = evaluate(problem, mapping)
    chosen = make_plan(problem, mapping, plain, "round trips", platform.name, fuse=True).mapping
    # each kind of order on its own (make_plan keeps the lowest latency within 5% of the
    # fastest): offsets one frame a round, and rounds of two frames
    offsets, _ = choose_interleave(problem, mapping, rounds_of=())
    app = build_app(problem, mapping)
    multi = [a for a, ps in app.phases.items() if len(ps) > 1]
    pair = replace(mapping, interleave={a: [0] * len(app.phases[a]) for a in multi},
                   round_frames=2)
    rows = []
    for name, m in (("frame order", mapping), ("offsets", offsets), ("2 frames a round", pair)):
        if name != "frame order" and not m.interleave:
            continue  # nothing to interleave
        plan = make_plan(problem, m, evaluate(problem, m), "round trips", platform.name,
                         fuse=True, interleave=False)
        thr, ahead = plan.predicted["throughput"], frames_ahead(plan.mapping)
        # many more frames than run ahead: a frame's last phase comes `ahead` rounds after its
        # first (the run leaves out the first and last `ahead` frames' completions)
        frames = max(40, int(seconds * thr), 8 * ahead)
        log(f"running {name}: predicted {thr:.1f} frames/s, {frames} frames")
        warmup = max(4, frames // 10, ahead)
        with tempfile.TemporaryDirectory() as tmp:
            trace = Path(tmp) / "trace.json"
            r = run_plan(plan, graph, frames, warmup, check="first", trace_path=trace)
            spent = time_per_frame(json.loads(trace.read_text()), range(warmup, frames - warmup))
        g = timed_graph(problem, plan.app, plan.mapping)
        load, with_transfers = load_bounds(g)
        spent["predicted_busy_s"] = {a.name: sum(a.exec_times) for a in g.actors}
        spent["predicted_transfers_s"] = sum(c.transfer_time for c in g.channels
                                             if c.src != c.dst)
        rows.append({"model": model, "plan": name, "mapping": f"every {every}th layer on {second}, "
                     f"the rest on {first}", "phases": {a: len(ps) for a, ps in
                                                        plan.app.phases.items()},
                     "predicted": thr, "measured": r.throughput,
                     "predicted_latency": plan.predicted["latency"],
                     "latency_p50": r.latency["p50"], "latency_p99": r.latency["p99"],
                     "checked_frames": r.checked_frames, "max_abs_error": r.max_abs_error,
                     "frames_ahead": frames_ahead(plan.mapping), "contention_factors": factors,
                     "chosen_by_make_plan": plan.mapping.key() == chosen.key(),
                     "load_bound": 1 / load, "load_and_transfers_bound": 1 / with_transfers,
                     "per_frame": spent})
        log(f"{name}: per frame, busy " + ", ".join(
            f"{e} {spent['busy_s'][e] * 1e3:.2f} ms (predicted "
            f"{spent['predicted_busy_s'].get(e, 0.0) * 1e3:.2f})" for e in sorted(spent['busy_s']))
            + f"; between firings {spent['between_s'] * 1e3:.2f} ms (predicted transfers "
            f"{spent['predicted_transfers_s'] * 1e3:.2f})")
    return rows


def time_per_frame(trace: dict, frames: range) -> dict:
    """From a run's Chrome trace, over `frames`: each element's firing time per frame
    (`busy_s`), and per frame the time from its first firing's start to its last firing's end
    not spent firing it (`between_s`, median): the hand-offs and waits between its phases, which
    frame by frame with one frame in flight is what the transfers are predicted to take."""
    import statistics
    from collections import defaultdict

    names = {ev["tid"]: ev["args"]["name"] for ev in trace["traceEvents"] if ev["ph"] == "M"}
    busy: dict[str, float] = defaultdict(float)
    spans: dict[int, tuple[float, float, float]] = {}  # frame -> (first start, last end, fired)
    for ev in trace["traceEvents"]:
        if ev["ph"] != "X" or ev["args"]["frame"] not in frames:
            continue
        busy[names[ev["tid"]]] += ev["dur"] * 1e-6
        s, e = ev["ts"] * 1e-6, (ev["ts"] + ev["dur"]) * 1e-6
        lo, hi, fired = spans.get(ev["args"]["frame"], (s, e, 0.0))
        spans[ev["args"]["frame"]] = (min(lo, s), max(hi, e), fired + e - s)
    n = max(1, len(spans))
    return {"frames": len(spans), "busy_s": {e: t / n for e, t in busy.items()},
            "between_s": statistics.median(hi - lo - fired for lo, hi, fired in spans.values())
            if spans else 0.0}


if __name__ == "__main__":
    from .script import run_script

    run_script(main, "python -m hetflow.bench.interleave_bench")
