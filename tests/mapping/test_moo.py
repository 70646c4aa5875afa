"""NSGA-II / SPEA2 over mappings: Pareto front, utilisation cap, infeasibility, determinism."""
from __future__ import annotations

import numpy as np
import pytest

from hetflow.errors import InfeasibleError, InputError
from hetflow.mapping.strategies import moo

FAST = dict(pop_size=16, generations=6)


@pytest.fixture(scope="module")
def problem(factory):
    return factory.problem(7, factory.elements(2, 1, 1), seed=3)


@pytest.fixture(scope="module", params=["nsga2", "spea2"])
def result(request, problem):
    return getattr(moo, request.param)(problem, seed=1, **FAST)


def test_front_is_non_dominated_and_best_is_fastest(result):
    names = result.notes["objectives"]
    F = np.array([moo.objective_values(m, names) for _, m in result.front])
    for i in range(len(F)):
        dominated = ((F <= F[i]).all(axis=1) & (F < F[i]).any(axis=1)).any()
        assert not dominated
    top = max(m.throughput for _, m in result.front)
    assert result.metrics.throughput >= top * 0.995
    assert [m.throughput for _, m in result.front] == sorted(
        (m.throughput for _, m in result.front), reverse=True)
    assert set(names) == {"throughput", "latency", "energy", "memory"}


def test_util_cap_is_met(problem):
    res = moo.nsga2(problem, seed=2, util_cap=0.5, **FAST)
    for _, m in res.front:
        assert moo.cpu_utilisation(problem, m, [e.name for e in problem.elements],
                                   "element")[0] <= 0.5 + 1e-9
    avg = moo.spea2(problem, seed=2, util_cap=0.3, util_scope="average", **FAST)
    for _, m in avg.front:
        assert moo.cpu_utilisation(problem, m, [e.name for e in problem.elements],
                                   "average")[0] <= 0.3 + 1e-9


def test_impossible_cap_is_infeasible(factory):
    """Only CPU cores: a self-timed pipeline keeps its bottleneck core busy."""
    p = factory.problem(5, factory.elements(2), seed=4, transfer=lambda n, a, b: 0.0)
    with pytest.raises(InfeasibleError, match=r"util_cap 0.3 .* loads cpu\d at 0\.\d\d"):
        moo.nsga2(p, util_cap=0.3, **FAST)


def test_energy_skipped_without_powers(factory):
    p = factory.problem(5, factory.elements(2, 1, power=False), seed=5)
    res = moo.spea2(p, **FAST)
    assert "energy" not in res.notes["objectives"] and "energy" in res.notes["skipped"]
    assert all(m.energy_per_frame is None for _, m in res.front)


def test_deterministic_per_seed(problem):
    a, b = moo.nsga2(problem, seed=7, **FAST), moo.nsga2(problem, seed=7, **FAST)
    assert [m.key() for m, _ in a.front] == [m.key() for m, _ in b.front]


def test_bad_options(problem):
    with pytest.raises(InputError, match="objective"):
        moo.nsga2(problem, objectives=["speed"])
    with pytest.raises(InputError, match="util_cap"):
        moo.nsga2(problem, util_cap=1.5)
