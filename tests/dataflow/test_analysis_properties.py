"""Property tests on random consistent CSDF graphs with mapping constraints (strategies.py)."""
from __future__ import annotations

import copy
import math
import random

from hypothesis import given, settings, strategies as st

from hetflow.dataflow.analysis import (check_liveness, throughput_mcr, throughput_simulation)
from hetflow.dataflow.analysis.hsdf import expand, zero_token_order
from hetflow.errors import DeadlockError

from strategies import csdf_graphs


def period_or_deadlock(method, g):
    try:
        return method(g).period
    except DeadlockError:
        return None


def same_period(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


@settings(max_examples=80, deadline=None)
@given(csdf_graphs(live=True, float_times=False) | csdf_graphs(live=True, float_times=True))
def test_mcr_and_simulation_agree_on_live_graphs(g):
    mcr, sim = throughput_mcr(g), throughput_simulation(g)
    assert same_period(mcr.period, sim.period), (mcr, sim, g.to_dict())
    assert (mcr.throughput == math.inf) == (mcr.period == 0)


@settings(max_examples=80, deadline=None)
@given(csdf_graphs(live=True, cycle_replicas=True)
       | csdf_graphs(live=True, float_times=True, cycle_replicas=True))
def test_mcr_and_simulation_agree_with_cycle_replicas(g):
    # replicated stages take whole phase cycles in turn and may start them out of index order
    mcr, sim = throughput_mcr(g), throughput_simulation(g)
    assert same_period(mcr.period, sim.period), (mcr, sim, g.to_dict())


@settings(max_examples=60, deadline=None)
@given(csdf_graphs(live=False, cycle_replicas=True))
def test_mcr_and_simulation_agree_with_cycle_replicas_that_may_deadlock(g):
    mcr, sim = period_or_deadlock(throughput_mcr, g), period_or_deadlock(throughput_simulation, g)
    assert same_period(mcr, sim), (mcr, sim, g.to_dict())


@settings(max_examples=60, deadline=None)
@given(csdf_graphs(live=False))
def test_mcr_and_simulation_agree_when_graphs_may_deadlock(g):
    mcr, sim = period_or_deadlock(throughput_mcr, g), period_or_deadlock(throughput_simulation, g)
    assert same_period(mcr, sim), (mcr, sim, g.to_dict())


@settings(max_examples=80, deadline=None)
@given(csdf_graphs(live=False))
def test_symbolic_execution_and_expansion_agree_on_liveness(g):
    try:
        check_liveness(g)
        live = True
    except DeadlockError:
        live = False
    try:
        zero_token_order(expand(g))
        acyclic = True
    except DeadlockError:
        acyclic = False
    assert live == acyclic


def throughput(g) -> float:
    try:
        return throughput_mcr(g).throughput
    except DeadlockError:
        return 0.0


@settings(max_examples=60, deadline=None)
@given(csdf_graphs(live=False), st.randoms(use_true_random=False))
def test_smaller_capacity_never_raises_throughput(g, rnd: random.Random):
    before = throughput(g)
    smaller = copy.deepcopy(g)
    c = rnd.choice(smaller.channels)
    if c.capacity is None:
        c.capacity = c.initial_tokens + rnd.randint(0, 4)
    elif c.capacity > c.initial_tokens:
        c.capacity -= 1
    assert throughput(smaller) <= before * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(csdf_graphs(live=False), st.randoms(use_true_random=False))
def test_longer_firings_or_transfers_never_raise_throughput(g, rnd: random.Random):
    before = throughput(g)
    slower = copy.deepcopy(g)
    if rnd.random() < 0.5:
        a = rnd.choice(slower.actors)
        p = rnd.randrange(a.phases)
        a.exec_times[p] += rnd.choice([0.5, 1.0, 3.0])
    else:
        rnd.choice(slower.channels).transfer_time += rnd.choice([0.5, 1.0])
    assert throughput(slower) <= before * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(csdf_graphs(live=True))
def test_random_graph_strategy_makes_live_graphs(g):
    # the `live` strategy takes capacities and static orders from an admissible schedule
    check_liveness(g)
