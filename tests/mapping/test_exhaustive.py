"""Exhaustive search: exact against plain enumeration, refuses big instances, sound bound."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from hetflow.errors import InputError
from hetflow.plan.mapping import Mapping, group_members, group_name
from hetflow.mapping.problem import evaluate
from hetflow.mapping.strategies import exhaustive
from hetflow.mapping.strategies.base import configurations, get_strategy


def set_partitions(items):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in set_partitions(rest):
        yield [[first], *part]
        for i in range(len(part)):
            yield [*part[:i], [first, *part[i]], *part[i + 1:]]


def brute_force_best(problem) -> float:
    """Every assignment over every split of each configuration into groups of identical
    elements (all set partitions, not one per size), every layer: no symmetry, no bound."""
    layers = [l.name for l in problem.graph.layers]
    best = 0.0
    for config in configurations(problem):
        for blocks in set_partitions(config):
            if any(len({problem.element(e).equivalence_key for e in b}) > 1 for b in blocks):
                continue
            actors = [group_name(b) for b in blocks]
            for combo in itertools.product(actors, repeat=len(layers)):
                m = evaluate(problem, Mapping(dict(zip(layers, combo))), with_latency=False)
                best = max(best, m.throughput)
    return best


@pytest.mark.parametrize("n_layers,n_cpu,n_gpu,big,seed", [
    (4, 2, 1, 0, 1), (5, 3, 0, 0, 2), (4, 1, 1, 1, 3), (3, 2, 0, 1, 4)])
def test_matches_plain_enumeration(factory, n_layers, n_cpu, n_gpu, big, seed):
    p = factory.problem(n_layers, factory.elements(n_cpu, n_gpu, big), seed=seed)
    res = exhaustive.search(p)
    assert res.metrics.throughput == pytest.approx(brute_force_best(p), rel=1e-9)
    assert res.evaluations < res.space_size or res.space_size <= 2  # the bound pruned


def test_refuses_big_instances(factory):
    with pytest.raises(InputError, match="at most 12 layers"):
        exhaustive.search(factory.problem(13, factory.elements(2), seed=0))
    with pytest.raises(InputError, match="4 elements"):
        exhaustive.search(factory.problem(5, factory.elements(5), seed=0))


def test_contiguous_mode_returns_a_pipeline(factory):
    p = factory.problem(9, factory.elements(2, 1, 1), seed=7)
    res = exhaustive.search(p, contiguous=True, max_stages=3)
    stages = [a for a, _ in itertools.groupby(res.best.assignment[l.name] for l in p.graph.layers)]
    assert len(stages) == len(set(stages)) <= 3
    assert res.metrics.throughput <= exhaustive.search(p).metrics.throughput * (1 + 1e-9)


def test_bound_holds_for_random_mappings(factory):
    """The premise of pruning: an actor of k elements with busy time T (plus at least one call
    overhead) completes at most k/T frames per second."""
    rng = np.random.default_rng(0)
    p = factory.problem(8, factory.elements(3, 1), seed=5)
    sets = [s for c in configurations(p) for s in exhaustive.actor_sets(p, c)]
    for _ in range(40):
        aset = sets[rng.integers(len(sets))]
        row = rng.integers(0, len(aset.actors), len(p.graph.layers))
        m = Mapping({l.name: aset.actors[a] for l, a in zip(p.graph.layers, row)})
        period = max((p.actor_time([l for l, a in m.assignment.items() if a == actor], actor)
                      + p.call_overhead) / len(group_members(actor)) for actor in m.actors)
        assert evaluate(p, m, with_latency=False).throughput <= (1 + 1e-9) / period


def test_registered(factory):
    p = factory.problem(4, factory.elements(2), seed=0)
    assert get_strategy("exhaustive")(p).metrics.throughput > 0
