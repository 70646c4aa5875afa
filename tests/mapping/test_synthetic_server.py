"""The estimated server profile other mapping tests use, and the search strategies on it."""
from __future__ import annotations

import numpy as np
import pytest

from hetflow.mapping.strategies.base import get_strategy
from synthetic_server import GPU_SPEEDUP, synthetic_problem

MINE = ["ga", "ilp", "nsga2", "spea2", "gp", "exhaustive"]


@pytest.mark.parametrize("name", MINE)
def test_strategies_are_registered(name):
    assert callable(get_strategy(name))


def test_the_synthetic_profile_is_what_it_says():
    p = synthetic_problem("alexnet")
    assert [e.name for e in p.elements] == [f"cpu{i}" for i in range(16)] + ["gpu0"]
    assert np.allclose(p.layer_times[:, :16], p.layer_times[:, [0]])
    assert np.allclose(p.layer_times[:, 0] / p.layer_times[:, 16], GPU_SPEEDUP)
    assert p.transfer(1000, "cpu0", "cpu0") == 0 < p.transfer(1000, "cpu0", "cpu1") \
        < p.transfer(1000, "cpu0", "gpu0")


def test_the_ilp_proves_its_mapping_optimal_and_no_worse_than_greedy():
    p = synthetic_problem("alexnet", n_cores=4)
    greedy = get_strategy("greedy")(p, seed=0)
    ilp = get_strategy("ilp")(p, seed=0)
    assert ilp.notes["status"] == "optimal"
    assert ilp.metrics.throughput >= greedy.metrics.throughput * (1 - 1e-6) > 0
