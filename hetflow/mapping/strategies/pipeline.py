"""Pipe-All's design space (Aghapour et al.): contiguous splits of the layer order into k stages,
every assignment of stages to (replica groups of) elements, searched exhaustively.

The space is searched exactly for the pipeline's bottleneck objective (largest stage time, a
replicated stage counting time/k): for each sequence of stage resources, a dynamic program over
split points finds the best split among all C(N-1, k-1) of them, the same answer enumeration gives,
in O(k N^2) instead. Identical elements are interchangeable, so sequences are enumerated over
resource *types* (element kind x replica count). The best designs by that objective are then
evaluated with the full CSDF analysis (transfers, FIFO capacities) and the best kept.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from hetflow.plan.mapping import Mapping, group_name
from hetflow.mapping.interleaving import RunScores
from hetflow.mapping.problem import Problem
from hetflow.mapping.strategies.base import SearchResult, best_of, configurations


@dataclass(frozen=True)
class ResourceType:
    key: tuple  # equivalence key of its elements
    size: int  # replicas
    column: int  # layer_times column of one member


def _types(problem: Problem, config: list[str]) -> tuple[list[ResourceType], dict[tuple, list[str]]]:
    pool: dict[tuple, list[str]] = {}
    for e in config:
        pool.setdefault(problem.element(e).equivalence_key, []).append(e)
    types = [ResourceType(k, s, problem.element_index[members[0]])
             for k, members in pool.items() for s in range(1, len(members) + 1)]
    return types, pool


def _sequences(types: list[ResourceType], pool: dict[tuple, list[str]], k: int):
    for seq in itertools.product(types, repeat=k):
        used: dict[tuple, int] = {}
        for t in seq:
            used[t.key] = used.get(t.key, 0) + t.size
        if all(used[key] <= len(pool[key]) for key in used):
            yield seq


def _best_split(prefix: np.ndarray, seq: list[ResourceType], overhead: float):
    """DP over split points: returns (bottleneck time, cut indices)."""
    n = prefix.shape[0] - 1
    k = len(seq)
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    choice = np.zeros((k, n + 1), dtype=np.int64)
    for s, t in enumerate(seq):
        p = prefix[:, t.column]
        with np.errstate(invalid="ignore"):
            cost = (p[None, :] - p[:, None]) / t.size + overhead  # cost[i, j]: layers i..j-1
        cost[np.isnan(cost)] = np.inf  # a layer that cannot run there (inf - inf)
        cand = np.maximum(best[:, None], cost)
        cand[np.tril_indices(n + 1)] = np.inf  # stages are non-empty: i < j
        choice[s] = np.argmin(cand, axis=0)
        best = cand[choice[s], np.arange(n + 1)]
    cuts, j = [], n
    for s in range(k - 1, 0, -1):
        j = int(choice[s, j])
        cuts.append(j)
    return float(best[n]), cuts[::-1]


def search(problem: Problem, seed: int = 0, max_stages: int = 3, top: int = 12,
           latency_cap: float | None = None, interleave: bool = True, **_
           ) -> SearchResult:
    """The `top` designs by bottleneck, analysed as their plans run them (with `interleave`,
    a stage whose frames leave and come back, as a branch of the model may make them, with
    interleaved phase orders where they are faster); the best within the latency cap."""
    t0 = time.perf_counter()
    runs = RunScores(problem, latency_cap, with_latency=True, interleave=interleave)
    layers = [l.name for l in problem.graph.layers]
    n = len(layers)
    # a GPU's columns are per-frame shares of it at its best lane count
    prefix = np.vstack([np.zeros(problem.layer_times.shape[1]),
                        np.cumsum(problem.frame_layer_times, axis=0)])
    designs = []  # (bottleneck, config, seq, cuts)
    space = 0
    for config in configurations(problem):
        types, pool = _types(problem, config)
        for k in range(1, min(max_stages, n) + 1):
            seqs = list(_sequences(types, pool, k))
            # concrete assignments per type sequence: ways to pick distinct elements
            for seq in seqs:
                ways = 1
                left = {key: len(m) for key, m in pool.items()}
                for t in seq:
                    ways *= math.comb(left[t.key], t.size)
                    left[t.key] -= t.size
                space += ways * math.comb(n - 1, k - 1)
                bottleneck, cuts = _best_split(prefix, list(seq), problem.call_overhead)
                if np.isfinite(bottleneck):
                    designs.append((bottleneck, config, seq, cuts))
    designs.sort(key=lambda d: d[0])
    scored, seen = [], set()
    for bottleneck, config, seq, cuts in designs:
        if len(scored) >= top:
            break
        pool = {}
        for e in config:
            pool.setdefault(problem.element(e).equivalence_key, []).append(e)
        actors = []
        for t in seq:
            members, pool[t.key] = pool[t.key][:t.size], pool[t.key][t.size:]
            actors.append(group_name(members))
        bounds = [0, *cuts, n]
        assignment = {layers[i]: actors[s] for s in range(len(seq))
                      for i in range(bounds[s], bounds[s + 1])}
        m = Mapping(assignment, "maximal", {"stages": len(seq), "cuts": cuts})
        if m.key() in seen:
            continue
        seen.add(m.key())
        scored.append(runs(m))
    best, metrics = best_of(scored, latency_cap)
    return SearchResult(best, metrics, scored, len(designs) + len(scored),
                        time.perf_counter() - t0, space,
                        {"designs_bottleneck_ranked": len(designs)}, scored_as_run=interleave)
