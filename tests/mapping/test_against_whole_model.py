"""No strategy returns a design analysed below the whole model on one element."""
from hypothesis import given, settings, strategies as st

from hetflow.plan.mapping import Mapping
from hetflow.mapping.planner import against_whole_model
from hetflow.mapping.problem import evaluate
from hetflow.mapping.strategies.base import SearchResult


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_a_worse_design_gives_way_to_the_best_whole_model(factory, seed):
    p = factory.small(seed)
    names = [e.name for e in p.elements]
    # a scattered design: layers dealt round the elements of the first configuration
    from hetflow.mapping.strategies.base import configurations

    config = configurations(p)[0]
    scattered = Mapping({l.name: config[i % len(config)] for i, l in enumerate(p.graph.layers)})
    got = against_whole_model(p, SearchResult(scattered, evaluate(p, scattered)))
    wholes = [evaluate(p, Mapping({l.name: e for l in p.graph.layers})).throughput for e in names]
    assert got.metrics.throughput >= max(wholes) * (1 - 1e-9)
    assert got.metrics.throughput >= evaluate(p, scattered).throughput * (1 - 1e-9)
    if got.best is not scattered:
        assert "whole_model_won" in got.notes and len(set(got.best.assignment.values())) == 1


def test_the_latency_cap_binds_the_whole_model_too(factory):
    p = factory.small(3)
    m = Mapping({l.name: p.elements[0].name for l in p.graph.layers})
    r = SearchResult(m, evaluate(p, m))
    cap = r.metrics.latency  # only designs at most this slow
    got = against_whole_model(p, r, latency_cap=cap)
    assert got.metrics.latency <= cap * (1 + 1e-9)
