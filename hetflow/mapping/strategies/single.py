"""Data-parallel designs: the whole model on one element, on a round-robin group of identical
elements, or on a weighted group of unlike elements (each member takes a share of the frames in
proportion to its speed: a CSDF distributor with cyclic rates). The last is how a GPU and the
CPU cores beside it can all work on one stream of frames, with outputs still in order."""
from __future__ import annotations

import time

from hetflow.plan.mapping import Mapping, group_name, weighted_pattern
from hetflow.mapping.problem import Problem, evaluate
from hetflow.mapping.strategies.base import SearchResult, best_of, configurations, replica_groups, whole_model_on


def search(problem: Problem, seed: int = 0, replicate: bool = True, weighted: bool = True,
           latency_cap: float | None = None, **_) -> SearchResult:
    t0 = time.perf_counter()
    scored = []
    seen = set()

    def add(m: Mapping) -> None:
        if m.key() not in seen:
            seen.add(m.key())
            scored.append((m, evaluate(problem, m)))

    for config in configurations(problem):
        for g in replica_groups(problem, config, None if replicate else 1):
            add(whole_model_on(problem, group_name(g)))
        if weighted and len(config) > 1:
            add(weighted_group(problem, config))
    best, metrics = best_of(scored, latency_cap)
    return SearchResult(best, metrics, scored, len(scored), time.perf_counter() - t0, len(scored))


def weighted_group(problem: Problem, config: list[str]) -> Mapping:
    """The whole model on a group of every element of `config`, each member taking a share of
    the frames by its speed (a GPU at its best lane count runs several at once)."""
    whole = [l.name for l in problem.graph.layers]
    times = [(problem.actor_time(whole, e) * problem.slowdown(e, k, True) + problem.call_overhead) / k
             for e in config for k in [problem.best_lanes(e)]]
    actor = group_name(config)
    m = whole_model_on(problem, actor)
    m.dispatch = {actor: weighted_pattern(times)}
    return m
