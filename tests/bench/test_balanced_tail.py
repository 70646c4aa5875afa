"""The balanced search keeps room for a p99 over a predicted latency (a median)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hetflow.bench.core import BenchSettings
from hetflow.mapping.planning import search_kind
from hetflow.errors import InfeasibleError
from hetflow.mapping.planner import search_candidates
from hetflow.mapping.problem import Problem
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform.spec import ProcessingElement


def test_the_search_takes_the_cap_over_the_tail_then_the_cap_itself(monkeypatch):
    import hetflow.mapping.planner as planner

    asked = []

    class Found:
        search: dict = {}

    def search(found_below):
        def run(problem, strategies, name, count, seed, fuse, opts, log, **kw):
            asked.append(opts["latency_cap"])
            if opts["latency_cap"] < found_below:
                return []
            return [(Found(), None)]
        return run

    def kind(tail, log=lambda m: None):
        return search_kind(None, ["single"], "p", 3, 0, True, {"latency_cap": 0.03}, log,
                           tail=tail, calibration=[{"step": "profile"}])

    said = []
    monkeypatch.setattr(planner, "search_candidates", search(0.0))
    (got,) = kind(1.5, said.append)
    assert asked == [pytest.approx(0.02)] and not said
    assert got[0].search["calibration"] == [{"step": "profile"}]  # the plan says its steps
    # nothing within cap / tail: the cap itself, said in the log
    asked.clear()
    monkeypatch.setattr(planner, "search_candidates", search(0.025))
    assert len(kind(1.5, said.append)) == 1
    assert asked == [pytest.approx(0.02), 0.03] and "within the cap itself" in said[0]

    def infeasible(problem, strategies, name, count, seed, fuse, opts, log, **kw):
        asked.append(opts["latency_cap"])
        if opts["latency_cap"] < 0.03:
            raise InfeasibleError("nothing fits")
        return [(Found(), None)]

    asked.clear()
    monkeypatch.setattr(planner, "search_candidates", infeasible)
    assert len(kind(1.5)) == 1 and asked == [pytest.approx(0.02), 0.03]
    # a tail of 1 (or less): the cap as given, once
    asked.clear()
    monkeypatch.setattr(planner, "search_candidates", search(0.0))
    kind(1.0)
    assert asked == [0.03]


def test_the_bench_searches_with_the_tail_rule_by_default():
    from hetflow.rules import BALANCED_TAIL

    assert BenchSettings().balanced_p99_over_predicted == BALANCED_TAIL.value > 1.0


def _problem(seed: int) -> tuple[Problem, float]:
    """A random CNN on three single cores and a GPU six times faster, and its time on a core."""
    rng = np.random.default_rng(seed)
    graph = random_cnn_graph(int(rng.integers(3, 9)), seed)
    els = [ProcessingElement(f"cpu{i}", "cpu", (i,)) for i in range(3)]
    els.append(ProcessingElement("gpu0", "gpu", (9,), device_index=0, model="gpu"))
    work = rng.uniform(0.2e-3, 2e-3, len(graph.layers))
    times = np.column_stack([work] * 3 + [work / 6.0])
    return (Problem(graph, els, times, lambda n, a, b: 0.0 if a == b else 20e-6 + n * 2e-9),
            float(work.sum()))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 50), st.floats(0.1, 1.5), st.floats(1.0, 2.0))
def test_designs_kept_for_a_balanced_plan_leave_room_for_the_tail(seed, share, tail):
    """Every candidate's predicted latency times the tail keeps the cap where any design does;
    where none does, every candidate keeps the cap itself."""
    problem, on_a_core = _problem(seed)
    # caps from below the GPU's time for the whole model to above a core's: both outcomes
    cap = share * on_a_core

    def search(opts):
        return search_candidates(problem, ["single", "pipeline"], "p", 3, 0, True, opts,
                                 skip_unfit=True)

    got = search_kind(problem, ["single", "pipeline"], "p", 3, 0, True, {"latency_cap": cap},
                      tail=tail, skip_unfit=True)
    lat = [plan.predicted["latency"] for plan, _ in got]
    tight = search({"latency_cap": cap / tail})
    if tight:
        assert all(x * tail <= cap * (1 + 1e-9) for x in lat)
    else:
        assert all(x <= cap * (1 + 1e-9) for x in lat)
