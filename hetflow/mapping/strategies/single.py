"""Baselines as strategies: the whole model on one element, or replicated on identical ones."""
from __future__ import annotations

import time

from ..mapping import group_name
from ..problem import Problem, evaluate
from .base import SearchResult, best_of, configurations, replica_groups, whole_model_on


def search(problem: Problem, seed: int = 0, replicate: bool = True, **_) -> SearchResult:
    t0 = time.perf_counter()
    scored = []
    seen = set()
    for config in configurations(problem):
        for g in replica_groups(problem, config, None if replicate else 1):
            actor = group_name(g)
            if actor in seen:
                continue
            seen.add(actor)
            m = whole_model_on(problem, actor)
            scored.append((m, evaluate(problem, m)))
    best, metrics = best_of(scored)
    return SearchResult(best, metrics, scored, len(scored), time.perf_counter() - t0, len(scored))
