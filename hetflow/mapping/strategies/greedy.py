"""HEFT-like list scheduling of one frame: each layer, in topological order, goes to the element
where it finishes earliest, counting transfers. The simple baseline (it minimises one frame's
makespan, not the pipeline's period). Run per configuration; the best prediction is kept."""
from __future__ import annotations

import time

from hetflow.mapping.interleaving import RunScores
from hetflow.plan.mapping import Mapping
from hetflow.mapping.problem import Problem
from hetflow.mapping.strategies.base import SearchResult, best_of, configurations


def greedy_assignment(problem: Problem, config: list[str]) -> dict[str, str]:
    g = problem.graph
    ready = {e: 0.0 for e in config}
    finish: dict[str, float] = {}
    where: dict[str, str] = {}
    for layer in g.layers:
        best = None
        for e in config:
            t = problem.layer_times[problem.layer_index[layer.name], problem.element_index[e]]
            start = ready[e]
            for t_name in layer.inputs:
                src = g.producer.get(t_name)
                if src is None:
                    continue
                arrive = finish[src]
                if where[src] != e:
                    arrive += problem.transfer(g.tensors[t_name].nbytes, where[src], e)
                start = max(start, arrive)
            if best is None or start + t < best[0]:
                best = (start + t, e)
        finish[layer.name], where[layer.name] = best
        ready[best[1]] = best[0]
    return where


def search(problem: Problem, seed: int = 0, latency_cap: float | None = None,
           interleave: bool = True, **_) -> SearchResult:
    """Greedy's mapping of each configuration, scored as its plan runs it (with `interleave`,
    its interleaved phase orders where they are faster); the best within the latency cap."""
    t0 = time.perf_counter()
    runs = RunScores(problem, latency_cap, with_latency=True, interleave=interleave)
    scored = [runs(Mapping(greedy_assignment(problem, config), "maximal"))
              for config in configurations(problem)]
    best, metrics = best_of(scored, latency_cap)
    return SearchResult(best, metrics, scored, len(scored), time.perf_counter() - t0, None,
                        scored_as_run=interleave)
