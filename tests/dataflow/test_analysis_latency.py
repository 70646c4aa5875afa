"""Latency: hand-worked cases (see latency.py for the definitions)."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings

from hetflow.dataflow.analysis import latency, throughput_mcr
from hetflow.dataflow.graphs import Actor, Channel, CsdfGraph
from hetflow.errors import InputError

from dataflow_helpers import chain
from strategies import csdf_graphs


def test_pipeline_latency_at_its_own_period():
    # a (1 s) -> b (2 s): alone 1 + 2; throttled to b's 2 s per frame nothing queues
    r = latency(chain([1.0, 2.0]))
    assert (r.isolated, r.steady, r.period, r.sources) == (3.0, 3.0, 2.0, ["a0"])


def test_slower_input_keeps_the_latency():
    r = latency(chain([1.0, 2.0]), period=5.0)
    assert (r.steady, r.period) == (3.0, 5.0)


def test_input_faster_than_the_graph_builds_a_backlog():
    r = latency(chain([1.0, 2.0]), period=1.0)
    assert math.isinf(r.steady) and r.isolated == 3.0 and r.period == 1.0


def test_a_graph_that_holds_its_source_back_runs_at_its_own_period():
    # with a one-slot FIFO, a cannot run ahead of b: the 1 s input period cannot be kept
    r = latency(chain([1.0, 2.0], capacity=1), period=1.0)
    assert (r.steady, r.period) == (3.0, 2.0)


def test_transfer_time_counts_in_latency():
    assert latency(chain([1.0, 1.0], transfer=2.0)).isolated == 4.0


def test_static_order_serialises_an_iteration():
    g = CsdfGraph("proc", [Actor("a", [1.0], processor="p"), Actor("b", [2.0], processor="p")],
                  [Channel("c", "a", "b", [1], [2])], {"p": ["a", "a", "b"]})
    r = latency(g)
    assert (r.isolated, r.steady, r.period) == (4.0, 4.0, 4.0)


def test_tokens_arrive_in_firing_order():
    # a's replicas take its phases in turn; firing 1 (1 s) ends at t=1 but its token waits for
    # firing 0's (t=5): b fires at 5 and 6, the iteration ends at 7 (6 if tokens overtook)
    g = CsdfGraph("order", [Actor("a", [5.0, 1.0], concurrency=2), Actor("b", [1.0])],
                  [Channel("c", "a", "b", [1, 1], [1])])
    r = latency(g)
    assert (r.isolated, r.steady, r.period) == (7.0, 7.0, 5.0)


def test_steady_latency_can_exceed_the_isolated_one():
    # a: phases of 2 s, three replicas taking firings in turn, so 4/3 s per iteration (two
    # firings); phase 1 produces one token for b (1 s). Throttled to 4/3 s, iteration k's
    # firing 2k starts at 4k/3 and firing 2k+1 waits for firing 2k-2 to end: it starts at
    # 4k/3 + 2/3 (k >= 1), b then runs from 4k/3 + 8/3 to 4k/3 + 11/3: latency 11/3 s.
    # Alone, both phases start at 0 and b ends at 3.
    g = CsdfGraph("k", [Actor("a", [2.0, 2.0], concurrency=3), Actor("b", [1.0])],
                  [Channel("c", "a", "b", [0, 1], [1])])
    r = latency(g)
    assert r.isolated == 3.0
    assert r.period == pytest.approx(4 / 3)
    assert r.steady == pytest.approx(11 / 3)


def test_all_actors_are_sources_when_none_lacks_inputs():
    g = CsdfGraph("cycle", [Actor("a", [2.0]), Actor("b", [3.0])],
                  [Channel("ab", "a", "b", [1], [1]), Channel("ba", "b", "a", [1], [1], 1)])
    r = latency(g)
    assert r.sources == ["a", "b"] and r.isolated == 5.0 and r.period == 5.0


def test_period_must_be_positive():
    with pytest.raises(InputError, match="period must be positive"):
        latency(chain([1.0]), period=0.0)


@settings(max_examples=40, deadline=None)
@given(csdf_graphs(live=True))
def test_latency_is_finite_at_the_graphs_own_period(g):
    r = latency(g)
    own = throughput_mcr(g).period
    assert r.period == pytest.approx(own, rel=1e-9, abs=0)
    # steady may be below isolated: phases that need no input of iteration k can run before
    # the source starts it, which they cannot do in iteration 0
    assert r.isolated >= 0 and math.isfinite(r.steady)
    if own > 0:  # (a period of 0, nothing limiting the rate, cannot be asked for)
        assert latency(g, period=own).steady == pytest.approx(r.steady, rel=1e-9)
    slower = latency(g, period=2 * own + 1)
    assert math.isfinite(slower.steady) and slower.period == 2 * own + 1
    if own > 0:  # a period a little above the graph's: no long transient to wait out
        assert math.isfinite(latency(g, period=own * (1 + 1e-6)).steady)
