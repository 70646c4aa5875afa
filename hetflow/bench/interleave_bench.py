"""Frame-interleaved firing orders on branchy CNNs under a GPU + 16-core profile.

The profile is search_bench's synthetic one (estimated, not measured). For each model the greedy
strategy's mapping (which sends frames GPU -> CPU -> GPU on these models) is analysed with each
element's phases in frame order and with the best interleaved orders (analysis/interleave.py),
and compared with its load bounds: the largest element load (its phases' times per frame), and
that load plus the transfers in and out of the element.

    python -m hetflow.bench.interleave_bench [MODEL ...]

Each model runs with the GPU 20x a core (search_bench's default) and 5x a core (where the greedy
mapping puts more on the cores).
"""
from __future__ import annotations

import sys
import time

from hetflow.dataflow.analysis.interleave import best_interleaving
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
    models = (sys.argv[1:] if argv is None else argv) or DEFAULT_MODELS
    for model in models:
        for speedup in (20.0, 5.0):
            problem = synthetic_problem(model, gpu_speedup=speedup)
            greedy = get_strategy("greedy")(problem, seed=0).best
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


if __name__ == "__main__":
    main()
