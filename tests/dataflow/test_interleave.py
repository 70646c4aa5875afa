"""Choosing frame-interleaved firing orders (analysis/interleave.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings

from hetflow.dataflow.analysis import throughput_mcr
from hetflow.dataflow.analysis.interleave import best_interleaving
from hetflow.dataflow.analysis.orders import Firing
from hetflow.dataflow.analysis.repetition import repetition_vector
from hetflow.dataflow.graphs import Actor, Channel, CsdfGraph

from strategies import csdf_graphs


def chain_round_trips(capacity: int | None) -> CsdfGraph:
    """gpu p0 -> cpu p0 -> gpu p1 -> cpu p1 -> gpu p2, as hetflow's CSDF conversion makes for a
    GPU stage whose frame visits a CPU twice; 1 ms transfers."""
    return CsdfGraph("rt", [Actor("gpu", [1e-3, 2e-3, 1e-3], processor="gpu"),
                            Actor("cpu", [2e-3, 1e-3], processor="cpu")],
                     [Channel("a", "gpu", "cpu", [1, 0, 0], [1, 0], 0, capacity, 1e-3),
                      Channel("b", "cpu", "gpu", [1, 0], [0, 1, 0], 0, capacity, 1e-3),
                      Channel("c", "gpu", "cpu", [0, 1, 0], [0, 1], 0, capacity, 1e-3),
                      Channel("d", "cpu", "gpu", [0, 1], [0, 0, 1], 0, capacity, 1e-3)])


@pytest.mark.parametrize("capacity", [None, 2, 1])
def test_interleaving_reaches_the_load_bound(capacity):
    g = chain_round_trips(capacity)
    best = best_interleaving(g)
    # in phase order every frame's whole round trip enters the period: 7 ms of work on the two
    # + 4 of transfers; interleaved, the GPU's 4 ms of work bounds it
    assert best.plain.period == pytest.approx(11e-3)
    assert best.result.period == pytest.approx(4e-3)
    assert throughput_mcr(g, best.orders).period == best.result.period
    for order in best.orders.values():  # a frame's phases still run in order on its processor
        offsets = [f.frame_offset for f in order]
        assert offsets == sorted(offsets, reverse=True) and offsets[-1] == 0


@settings(max_examples=40, deadline=None)
@given(csdf_graphs(mapped=False, max_actors=4))
def test_the_chosen_orders_are_live_and_never_worse(g):
    for a in g.actors:
        a.processor, a.concurrency = a.name, 1
    best = best_interleaving(g)
    assert best.result.period <= best.plain.period * (1 + 1e-12)
    assert throughput_mcr(g, best.orders).period == pytest.approx(best.result.period)
    for order in best.orders.values():
        offsets = [f.frame_offset for f in order]
        assert offsets == sorted(offsets, reverse=True) and min(offsets) == 0


@settings(max_examples=40, deadline=None)
@given(csdf_graphs(mapped=False, max_actors=4))
def test_an_offset_all_firings_share_changes_nothing(g):
    """What lets the search keep every order's last offset at 0 (so that the frames ahead it
    reports are not inflated): the analysis sees only the differences of the offsets along an
    order, so a shift all firings of a processor share leaves the period as it is."""
    for a in g.actors:
        a.processor, a.concurrency = a.name, 1
    best = best_interleaving(g)
    orders = {**best.orders}
    for a in g.actors:  # every processor with several firings, interleaved or not
        if repetition_vector(g)[a.name] > 1 and a.processor not in orders:
            orders[a.processor] = tuple(Firing(a.name, i) for i in
                                        range(repetition_vector(g)[a.name]))
    base = throughput_mcr(g, orders).period
    assert base == pytest.approx(best.result.period)
    for proc, order in orders.items():
        shifted = {**orders, proc: tuple(Firing(f.actor, f.firing, f.frame_offset + 1)
                                         for f in order)}
        assert throughput_mcr(g, shifted).period == pytest.approx(base)
