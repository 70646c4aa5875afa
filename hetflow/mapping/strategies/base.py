"""What every search strategy returns, the strategy registry, and shared helpers."""
from __future__ import annotations

import importlib
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from hetflow.errors import InputError

from hetflow.plan.mapping import Mapping, group_name
from hetflow.mapping.problem import Metrics, Problem
import inspect
import networkx as nx


@dataclass
class SearchResult:
    best: Mapping
    metrics: Metrics
    front: list[tuple[Mapping, Metrics]] = field(default_factory=list)  # multi-objective
    evaluations: int = 0
    seconds: float = 0.0
    space_size: int | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    # a design over a rewritten model (layer splits): the problem `best` is a mapping of, and
    # the splits that turn the given model into it
    problem: Any = None
    splits: list = field(default_factory=list)
    # `best`, `metrics` and `front` are as plans run them: each mapping with the interleaved
    # phase orders a plan gives it (interleaving.RunScores), so planning need not choose again
    scored_as_run: bool = False


class Strategy(Protocol):
    def __call__(self, problem: Problem, seed: int = 0, **options: Any) -> SearchResult: ...


# name -> "module:function"; imported lazily so heavy optional dependencies load only when used
REGISTRY: dict[str, str] = {
    "single": "hetflow.mapping.strategies.single:search",
    "greedy": "hetflow.mapping.strategies.greedy:search",
    "pipeline": "hetflow.mapping.strategies.pipeline:search",
    "ga": "hetflow.mapping.strategies.ga:search",
    "ilp": "hetflow.mapping.strategies.ilp:search",
    "nsga2": "hetflow.mapping.strategies.moo:nsga2",
    "spea2": "hetflow.mapping.strategies.moo:spea2",
    "gp": "hetflow.mapping.strategies.gp:search",
    "exhaustive": "hetflow.mapping.strategies.exhaustive:search",
}


def register_strategy(name: str, target: str) -> None:
    if name in REGISTRY and REGISTRY[name] != target:
        raise ValueError(f"strategy {name!r} is already registered")
    REGISTRY[name] = target


def get_strategy(name: str) -> Callable[..., SearchResult]:
    if name not in REGISTRY:
        raise InputError(f"unknown strategy {name!r} (known: {', '.join(sorted(REGISTRY))})")
    module, fn = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), fn)


def strategy_options(name: str, options: dict | None = None) -> set[str]:
    """The option names strategy `name` takes: its search function's keyword parameters (or
    those of the function named by its `options_of`); a strategy marked `passes_options_to_base`
    also takes its base strategy's (`options["base"]`, default pipeline). Not `interleave`,
    which the planner passes (whether plans interleave, hence how designs are scored)."""

    fn = get_strategy(name)
    params = inspect.signature(getattr(fn, "options_of", fn)).parameters.values()
    known = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    known -= {"problem", "seed", "algorithm", "interleave"}
    if getattr(fn, "passes_options_to_base", False):
        known |= strategy_options((options or {}).get("base", "pipeline"))
    return known


def check_options(name: str, options: dict) -> None:
    """InputError naming the first option strategy `name` does not take (a typo would
    otherwise be silently ignored)."""
    known = strategy_options(name, options)
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(f"strategy {name!r} has no option {unknown[0]!r} "
                         f"(its options: {', '.join(sorted(known)) or 'none'})")


def configurations(problem: Problem) -> list[list[str]]:
    """Element sets usable together: the problem's own list, or else every maximal set of
    pairwise core-disjoint elements (the maximal cliques of the compatibility graph)."""
    if problem.configurations:
        return [list(c) for c in problem.configurations]

    names = [e.name for e in problem.elements]
    idx = problem.element_index
    g = nx.Graph()
    g.add_nodes_from(names)
    g.add_edges_from((a, b) for a, b in itertools.combinations(names, 2)
                     if not problem.conflicts[idx[a], idx[b]])
    cliques = [sorted(c, key=idx.get) for c in nx.find_cliques(g)]
    return sorted(cliques, key=lambda c: (-len(c), [idx[n] for n in c]))


def replica_groups(problem: Problem, elements: list[str], max_size: int | None = None
                   ) -> list[tuple[str, ...]]:
    """Groups of 1..n identical elements (same equivalence key) among `elements`. Identical
    elements are interchangeable, so one group per size is enough (the first r of them)."""
    by_key: dict[tuple, list[str]] = {}
    for e in elements:
        by_key.setdefault(problem.element(e).equivalence_key, []).append(e)
    groups = []
    for members in by_key.values():
        for r in range(1, min(len(members), max_size or len(members)) + 1):
            groups.append(tuple(members[:r]))
    return groups


def best_of(scored: list[tuple[Mapping, Metrics]], latency_cap: float | None = None
            ) -> tuple[Mapping, Metrics]:
    """Highest throughput (with `latency_cap`: among designs whose predicted latency is within
    it); ties (within 0.5%) broken by lower latency."""
    if latency_cap is not None:
        ok = [(mp, m) for mp, m in scored if m.latency <= latency_cap]
        if not ok:
            from hetflow.errors import InfeasibleError

            fastest = min((m.latency for _, m in scored), default=float("nan"))
            raise InfeasibleError(f"latency cap {latency_cap * 1e3:.2f} ms: the lowest predicted "
                                  f"latency among {len(scored)} designs is {fastest * 1e3:.2f} ms")
        scored = ok
    top = max(m.throughput for _, m in scored)
    near = [(mp, m) for mp, m in scored if m.throughput >= top * 0.995]
    return min(near, key=lambda x: (x[1].latency if x[1].latency == x[1].latency else 0.0,
                                    -x[1].throughput))


def whole_model_on(problem: Problem, actor: str, policy: str = "maximal") -> Mapping:
    return Mapping({l.name: actor for l in problem.graph.layers}, policy)


__all__ = ["SearchResult", "Strategy", "REGISTRY", "register_strategy", "get_strategy",
           "strategy_options", "check_options",
           "configurations", "replica_groups", "best_of", "whole_model_on", "group_name"]
