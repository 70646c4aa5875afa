"""The search benchmark's synthetic server profile and its table (on a small zoo model)."""
from __future__ import annotations

import numpy as np
import pytest

from hetflow.bench.search_bench import GPU_SPEEDUP, bench, synthetic_problem
from hetflow.mapping.strategies.base import get_strategy

MINE = ["ga", "ilp", "nsga2", "spea2", "gp", "exhaustive"]


@pytest.mark.parametrize("name", MINE)
def test_strategies_are_registered(name):
    assert callable(get_strategy(name))


def test_synthetic_profile_and_table():
    p = synthetic_problem("alexnet")
    assert [e.name for e in p.elements] == [f"cpu{i}" for i in range(16)] + ["gpu0"]
    assert np.allclose(p.layer_times[:, :16], p.layer_times[:, [0]])
    assert np.allclose(p.layer_times[:, 0] / p.layer_times[:, 16], GPU_SPEEDUP)
    assert p.transfer(1000, "cpu0", "cpu0") == 0 < p.transfer(1000, "cpu0", "cpu1") \
        < p.transfer(1000, "cpu0", "gpu0")
    lines = []
    rows = bench(["alexnet"], ["greedy", "ilp", "exhaustive"], out=lines.append, n_cores=4)
    assert [r["strategy"] for r in rows] == ["greedy", "ilp"]
    assert all(r["fps"] > 0 and r["seconds"] >= 0 for r in rows)
    assert rows[1]["status"] == "optimal"
    assert "skipped" in lines[-1] and "4 elements" in lines[-1]
