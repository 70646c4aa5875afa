"""Repetition vectors, liveness and the messages of deadlocks and bad graphs."""
from __future__ import annotations

import pytest

from hetflow.dataflow.analysis import (check_liveness, repetition_vector, throughput_mcr,
                                       throughput_simulation)
from hetflow.dataflow.analysis.hsdf import expand, zero_token_order
from hetflow.dataflow.analysis.liveness import sequential_schedule
from hetflow.dataflow.graphs import Actor, Channel, CsdfGraph
from hetflow.errors import DeadlockError, InputError


def test_repetition_vector_counts_firings_of_all_phases():
    # a: 2 phases producing 1+2 = 3 per cycle; b: 3 phases consuming 1+0+1 = 2 per cycle.
    # Cycles: 2 of a, 3 of b; firings 4 and 9.
    g = CsdfGraph("r", [Actor("a", [1, 1]), Actor("b", [1, 1, 1])],
                  [Channel("c", "a", "b", [1, 2], [1, 0, 1])])
    assert repetition_vector(g) == {"a": 4, "b": 9}


def test_repetition_vector_solves_components_separately():
    g = CsdfGraph("r", [Actor("a", [1]), Actor("b", [1]), Actor("x", [1, 2])],
                  [Channel("c", "a", "b", [1], [2])])
    assert repetition_vector(g) == {"a": 2, "b": 1, "x": 2}


def test_inconsistent_graph_names_the_channel():
    g = CsdfGraph("bad", [Actor("a", [1]), Actor("b", [1])],
                  [Channel("one", "a", "b", [1], [1]), Channel("two", "a", "b", [2], [1])])
    with pytest.raises(InputError, match="channel 'two'.*inconsistent"):
        repetition_vector(g)


def test_inconsistent_self_loop_is_refused():
    g = CsdfGraph("bad", [Actor("a", [1])], [Channel("loop", "a", "a", [2], [1], 1)])
    with pytest.raises(InputError, match="'loop'"):
        repetition_vector(g)


def test_deadlock_names_blocked_actors_and_channels():
    g = CsdfGraph("dead", [Actor("a", [1]), Actor("b", [1])],
                  [Channel("ab", "a", "b", [1], [1]), Channel("ba", "b", "a", [2], [2], 1)])
    with pytest.raises(DeadlockError) as err:
        check_liveness(g)
    msg = str(err.value)
    assert "actor 'a' waits for tokens on channel 'ba' (has 1, needs 2)" in msg
    assert "actor 'b' waits for tokens on channel 'ab' (has 0, needs 1)" in msg
    assert err.value.blocked == {"a": "tokens on channel 'ba' (has 1, needs 2)",
                                 "b": "tokens on channel 'ab' (has 0, needs 1)"}
    for method in (throughput_mcr, throughput_simulation):
        with pytest.raises(DeadlockError, match="'ba'"):
            method(g)


def test_deadlock_on_capacity_names_the_space():
    g = CsdfGraph("full", [Actor("a", [1]), Actor("b", [1])], [Channel("c", "a", "b", [3], [3],
                                                                        capacity=2)])
    with pytest.raises(DeadlockError, match=r"actor 'a' waits for space on channel 'c' "
                                            r"\(capacity 2, occupied 0, needs 3\)"):
        check_liveness(g)


def test_deadlock_on_static_order_names_the_processor():
    g = CsdfGraph("order", [Actor("a", [1], processor="p"), Actor("b", [1], processor="p")],
                  [Channel("c", "a", "b", [1], [1])], {"p": ["b", "a"]})
    with pytest.raises(DeadlockError) as err:
        check_liveness(g)
    assert "actor 'a' waits for its turn in the static order of processor 'p' (next: 'b')" \
        in str(err.value)
    assert "actor 'b' waits for tokens on channel 'c'" in str(err.value)


def test_zero_token_cycle_is_a_deadlock_in_the_expansion_too():
    g = CsdfGraph("order", [Actor("a", [1], processor="p"), Actor("b", [1], processor="p")],
                  [Channel("c", "a", "b", [1], [1])], {"p": ["b", "a"]})
    with pytest.raises(DeadlockError, match="'a', 'b'"):
        zero_token_order(expand(g))


def test_a_bounded_self_loop_reuses_the_space_it_frees():
    g = CsdfGraph("state", [Actor("a", [1])], [Channel("s", "a", "a", [2], [2], 2, capacity=2)])
    check_liveness(g)
    assert throughput_mcr(g).period == throughput_simulation(g).period == 1


@pytest.mark.parametrize("orders,message", [
    ({}, "share processor 'p' but the graph has no static_order"),
    ({"p": ["a", "b"]}, "lists actor 'a' 1 times but it fires 2 times"),
])
def test_static_orders_must_cover_the_processor(orders, message):
    g = CsdfGraph("m", [Actor("a", [1], processor="p"), Actor("b", [1], processor="p")],
                  [Channel("c", "a", "b", [1], [2])], orders)
    with pytest.raises(InputError, match=message):
        check_liveness(g)


def test_sequential_schedule_gives_valid_static_orders():
    g = CsdfGraph("s", [Actor("a", [1]), Actor("b", [1]), Actor("c", [1])],
                  [Channel("ab", "a", "b", [1], [2], capacity=2), Channel("bc", "b", "c", [3], [1])])
    sequence = sequential_schedule(g)
    assert sorted(sequence) == ["a", "a", "b", "c", "c", "c"]
    for a in g.actors:
        a.processor = "p"
    g.static_order = {"p": sequence}
    check_liveness(g)
