"""Hand-worked throughput cases; each is checked with both methods."""
from __future__ import annotations

import math
import time

import pytest

from hetflow.dataflow.analysis import (StateSpaceLimitError, throughput_mcr,
                                       throughput_simulation)
from hetflow.dataflow.analysis.liveness import sequential_schedule
from hetflow.dataflow.analysis.hsdf import expand
from hetflow.dataflow.graphs import Actor, Channel, CsdfGraph
from hetflow.errors import InputError

from dataflow_helpers import chain

BOTH = [throughput_mcr, throughput_simulation]


def two_actor_cycle(tokens: int) -> CsdfGraph:
    return CsdfGraph("cycle", [Actor("A", [2.0]), Actor("B", [3.0])],
                     [Channel("ab", "A", "B", [1], [1]), Channel("ba", "B", "A", [1], [1], tokens)])


@pytest.mark.parametrize("method", BOTH)
@pytest.mark.parametrize("tokens,period", [
    (1, 5.0),  # one token goes round: A then B, 2 + 3 per iteration
    (2, 3.0),  # two tokens: A and B overlap; B, busy 3 per iteration, limits
])
def test_two_actor_cycle(method, tokens, period):
    assert method(two_actor_cycle(tokens)).period == pytest.approx(period)


def test_two_actor_cycle_critical_actors():
    assert sorted(throughput_mcr(two_actor_cycle(1)).critical) == ["A", "B"]
    assert throughput_mcr(two_actor_cycle(2)).critical == ["B"]


@pytest.mark.parametrize("method", BOTH)
@pytest.mark.parametrize("capacity,transfer,period", [
    (None, 0.0, 2.0),  # b (2 s) is the bottleneck
    (1, 0.0, 2.0),  # a's token frees its slot when b starts: a waits 1 s per 2 s, no loss
    (1, 3.0, 4.0),  # a slot is held from a's start to b's start: 1 + 3 s, one slot
    (2, 3.0, 2.0),  # two slots: 4 s / 2 tokens = 2, b again the bottleneck
])
def test_pipeline_with_bounded_fifo(method, capacity, transfer, period):
    g = chain([1.0, 2.0], capacity=capacity, transfer=transfer)
    assert method(g).period == pytest.approx(period)


@pytest.mark.parametrize("method", BOTH)
@pytest.mark.parametrize("concurrency,period", [(1, 4.0), (2, 2.0), (3, 4.0 / 3)])
def test_actor_with_concurrency(method, concurrency, period):
    # a source of 4 s feeding a fast sink: k replicas in turn give one firing per 4/k s
    g = chain([4.0, 0.5], concurrency=None)
    g.actors[0].concurrency = concurrency
    g.actors[1].concurrency = 1
    assert method(g).period == pytest.approx(period)


@pytest.mark.parametrize("method", BOTH)
def test_unbounded_concurrency_gives_infinite_throughput(method):
    result = method(chain([4.0, 0.5], concurrency=None))
    assert math.isinf(result.throughput) and result.period == 0


@pytest.mark.parametrize("method", BOTH)
def test_two_actors_on_one_processor_with_static_order(method):
    # a (1 s) produces one token, b (2 s) consumes two: q = (2, 1); on one processor in the
    # order a, a, b an iteration takes 1 + 1 + 2 = 4 s
    g = CsdfGraph("proc", [Actor("a", [1.0], processor="p"), Actor("b", [2.0], processor="p")],
                  [Channel("c", "a", "b", [1], [2])], {"p": ["a", "a", "b"]})
    assert method(g).period == pytest.approx(4.0)
    g.actors[1].processor = None
    g.static_order = {"p": ["a", "a"]}
    assert method(g).period == pytest.approx(2.0)  # apart, b overlaps with a's next firings


def test_static_order_cycle_is_critical():
    g = CsdfGraph("proc", [Actor("a", [1.0], processor="p"), Actor("b", [2.0], processor="p")],
                  [], {"p": ["b", "a"]})
    result = throughput_mcr(g)
    assert result.period == pytest.approx(3.0) and sorted(result.critical) == ["a", "b"]


@pytest.mark.parametrize("method", BOTH)
def test_transfer_time_delays_the_consumer(method):
    # a -> b takes 0.5 s on the way; b -> a returns the one token at once: 1 + 0.5 + 1
    g = CsdfGraph("tt", [Actor("a", [1.0]), Actor("b", [1.0])],
                  [Channel("ab", "a", "b", [1], [1], transfer_time=0.5),
                   Channel("ba", "b", "a", [1], [1], 1)])
    assert method(g).period == pytest.approx(2.5)


@pytest.mark.parametrize("method", BOTH)
def test_csdf_phases_pipeline(method):
    # a's two phases (1 s, 3 s) produce 1 and 0 tokens; b consumes one per firing
    g = CsdfGraph("ph", [Actor("a", [1.0, 3.0]), Actor("b", [2.0])],
                  [Channel("c", "a", "b", [1, 0], [1])])
    assert method(g).period == pytest.approx(4.0)


@pytest.mark.parametrize("method", BOTH)
def test_replicas_take_firings_in_turn(method):
    # a has two replicas taking firings in turn; its phases take 5 s and 1 s, so replica 0
    # always gets the 5 s phase: one iteration (both phases) per 5 s
    g = CsdfGraph("turns", [Actor("a", [5.0, 1.0], concurrency=2), Actor("b", [1.0])],
                  [Channel("c", "a", "b", [1, 1], [1])])
    assert method(g).period == pytest.approx(5.0)


def test_mcr_is_fast_on_300_firings():
    # 20 actors of 15 phases on 5 processors, every channel bounded: 300 HSDF nodes
    actors = [Actor(f"a{i}", [0.001 * (1 + (i * 7 + p) % 5) for p in range(15)],
                    processor=f"p{i % 5}") for i in range(20)]
    channels = [Channel(f"c{i}", f"a{i}", f"a{i + 1}", [2 if p % 3 == 0 else 1 for p in range(15)],
                        [1 if p < 10 else 2 for p in range(15)], capacity=6) for i in range(19)]
    channels += [Channel(f"s{i}", f"a{i}", f"a{i + 3}", [1] * 15, [1] * 15, capacity=20)
                 for i in range(0, 17, 2)]
    g = CsdfGraph("big", actors, channels)
    processors = {a.name: a.processor for a in actors}
    for a in actors:
        a.processor = None
    sequence = sequential_schedule(g)
    for a in actors:
        a.processor = processors[a.name]
    g.static_order = {f"p{k}": [a for a in sequence if processors[a] == f"p{k}"] for k in range(5)}
    h = expand(g)
    assert h.n == 300 and len(h.src) >= 1000
    start = time.process_time()
    result = throughput_mcr(g)
    assert time.process_time() - start < 0.5
    assert result.period > 0


def test_simulation_budget_is_reported():
    with pytest.raises(StateSpaceLimitError, match="no recurrent state within 3 firings"):
        throughput_simulation(two_actor_cycle(2), max_firings=3)


def test_expansion_size_is_bounded():
    with pytest.raises(InputError, match="one iteration has 5 firings, more than the 4"):
        expand(CsdfGraph("big", [Actor("a", [1.0] * 5)], []), max_nodes=4)


def test_zero_time_producer_feeding_unbounded_concurrency_has_period_zero():
    # a0 takes no time and may refill the 2-slot FIFO as soon as a1 starts; a1 (5 s) has
    # unbounded concurrency, so both fire for ever at time 0. a1's unfinished firings pile up
    # and no full state recurs: the simulation must see the instant repeat (it used to crawl
    # towards its 2M-firing budget, quadratically)
    g = CsdfGraph("g", [Actor("a0", [0.0], processor="p0"), Actor("a1", [5.0], concurrency=None)],
                  [Channel("c0", "a0", "a1", [2], [2], capacity=2)], {"p0": ["a0"]})
    assert throughput_mcr(g).period == 0.0
    sim = throughput_simulation(g, max_firings=10_000)
    assert sim.period == 0.0 and sim.throughput == math.inf


def test_howard_converges_where_re_anchored_potentials_cycled():
    # a random graph on which Howard's policy iteration went round for 10,000 rounds: each
    # evaluation anchored a kept cycle's potentials at 0 again, undoing improvements elsewhere.
    # The state-space simulation, an independent method, gives 6 s.
    g = CsdfGraph("random", [Actor("a0", [2.0, 2.0], concurrency=2),
                             Actor("a1", [2.0], concurrency=2),
                             Actor("a2", [1.0, 2.0, 0.0]), Actor("a3", [5.0, 1.0]),
                             Actor("a4", [2.0, 1.0])],
                  [Channel("c0", "a0", "a1", [0, 3], [3], transfer_time=1.0),
                   Channel("c1", "a0", "a2", [1, 0], [0, 2, 0]),
                   Channel("c2", "a0", "a3", [2, 0], [3, 1], capacity=6),
                   Channel("c3", "a2", "a4", [0, 1, 1], [1, 0]),
                   Channel("c4", "a1", "a3", [2], [0, 4]),
                   Channel("c5", "a0", "a0", [1, 2], [2, 1], initial_tokens=8)])
    assert throughput_simulation(g).period == 6.0
    assert throughput_mcr(g).period == 6.0
