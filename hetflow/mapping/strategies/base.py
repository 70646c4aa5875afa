"""What every search strategy returns, the strategy registry, and shared helpers."""
from __future__ import annotations

import importlib
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from hetflow.errors import InputError

from ..mapping import Mapping, group_name
from ..problem import Metrics, Problem


@dataclass
class SearchResult:
    best: Mapping
    metrics: Metrics
    front: list[tuple[Mapping, Metrics]] = field(default_factory=list)  # multi-objective
    evaluations: int = 0
    seconds: float = 0.0
    space_size: int | None = None
    notes: dict[str, Any] = field(default_factory=dict)


class Strategy(Protocol):
    def __call__(self, problem: Problem, seed: int = 0, **options: Any) -> SearchResult: ...


# name -> "module:function"; imported lazily so heavy optional dependencies load only when used
REGISTRY: dict[str, str] = {
    "single": "hetflow.mapping.strategies.single:search",
    "greedy": "hetflow.mapping.strategies.greedy:search",
    "pipeline": "hetflow.mapping.strategies.pipeline:search",
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


def configurations(problem: Problem) -> list[list[str]]:
    """Element sets usable together: the problem's own list, or every maximal set of
    pairwise core-disjoint elements when the problem gives none (fine for small platforms)."""
    if problem.configurations:
        return [list(c) for c in problem.configurations]
    names = [e.name for e in problem.elements]
    idx = problem.element_index
    out: list[list[str]] = []
    for r in range(len(names), 0, -1):
        for combo in itertools.combinations(names, r):
            if any(problem.conflicts[idx[a], idx[b]] for a, b in itertools.combinations(combo, 2)):
                continue
            if any(set(combo) <= set(o) for o in out):
                continue
            out.append(list(combo))
    return out


def replica_groups(problem: Problem, elements: list[str], max_size: int | None = None
                   ) -> list[tuple[str, ...]]:
    """Non-empty sets of identical elements (same equivalence key) among `elements`."""
    by_key: dict[tuple, list[str]] = {}
    for e in elements:
        by_key.setdefault(problem.element(e).equivalence_key, []).append(e)
    groups = []
    for members in by_key.values():
        for r in range(1, min(len(members), max_size or len(members)) + 1):
            groups.extend(itertools.combinations(members, r))
    return groups


def best_of(scored: list[tuple[Mapping, Metrics]]) -> tuple[Mapping, Metrics]:
    """Highest throughput; ties (within 0.5%) broken by lower latency."""
    top = max(m.throughput for _, m in scored)
    near = [(mp, m) for mp, m in scored if m.throughput >= top * 0.995]
    return min(near, key=lambda x: (x[1].latency if x[1].latency == x[1].latency else 0.0,
                                    -x[1].throughput))


def whole_model_on(problem: Problem, actor: str, policy: str = "maximal") -> Mapping:
    return Mapping({l.name: actor for l in problem.graph.layers}, policy)


__all__ = ["SearchResult", "Strategy", "REGISTRY", "register_strategy", "get_strategy",
           "configurations", "replica_groups", "best_of", "whole_model_on", "group_name"]
