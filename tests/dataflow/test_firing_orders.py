"""Frame-interleaved firing orders (analysis/orders.py `Firing`) in the HSDF analysis and the
state-space simulation, against an unfolded schedule and against each other."""
from __future__ import annotations

import random

import networkx as nx
import pytest
from hypothesis import given, settings, strategies as st

from hetflow.dataflow.analysis import repetition_vector, throughput_mcr, throughput_simulation
from hetflow.dataflow.analysis.orders import Firing
from hetflow.dataflow.graphs import Actor, Channel, CsdfGraph
from hetflow.errors import DeadlockError, InputError

from strategies import csdf_graphs


def round_trip() -> CsdfGraph:
    """gpu phase 0 -> cpu -> gpu phase 1, 1 s each, 1 s transfers: the frame leaves the GPU
    between its phases."""
    return CsdfGraph("rt", [Actor("gpu", [1.0, 1.0], processor="gpu"),
                            Actor("cpu", [1.0], processor="cpu")],
                     [Channel("x", "gpu", "cpu", [1, 0], [1], transfer_time=1.0),
                      Channel("y", "cpu", "gpu", [1], [0, 1], transfer_time=1.0)])


def gpu_order(offset: int):
    return {"gpu": (Firing("gpu", 0, offset), Firing("gpu", 1, 0))}


def simulated(g, orders=None):
    return throughput_simulation(g, orders=orders)


@pytest.mark.parametrize("analyse", [throughput_mcr, simulated])
def test_interleaving_takes_the_round_trip_out_of_the_period(analyse):
    g = round_trip()
    assert analyse(g).period == pytest.approx(5.0)  # a0 + x + cpu + y + a1
    assert analyse(g, gpu_order(0)).period == pytest.approx(5.0)  # the same order
    # phase 0 of frame f + 1 before phase 1 of frame f: the 5 s loop spans two frames
    assert analyse(g, gpu_order(1)).period == pytest.approx(2.5)
    # two frames ahead: the loop spans three frames, the GPU's own 2 s load bounds
    assert analyse(g, gpu_order(2)).period == pytest.approx(2.0)


@pytest.mark.parametrize("analyse", [throughput_mcr, simulated])
def test_an_order_that_waits_for_its_own_future_is_a_deadlock(analyse):
    g = round_trip()
    # phase 1 of frame f + 1 before phase 0 of frame f + 1 ends: it needs the cpu's result of it
    with pytest.raises(DeadlockError):
        analyse(g, {"gpu": (Firing("gpu", 0, 0), Firing("gpu", 1, 1))})


@pytest.mark.parametrize("order, says", [
    ((Firing("gpu", 0),), "leaves out firing 1"),
    ((Firing("gpu", 0), Firing("gpu", 0), Firing("gpu", 1)), "twice"),
    ((Firing("gpu", 0), Firing("gpu", 2)), "no firing 2"),
    ((Firing("gpu", 0), Firing("gpu", 1), Firing("cpu", 0)), "not mapped on it"),
])
def test_malformed_orders_are_refused(order, says):
    with pytest.raises(InputError, match=says):
        throughput_mcr(round_trip(), {"gpu": order})


def unfolded_period(g: CsdfGraph, orders, frames: int = 240) -> float:
    """Independent oracle: every firing of `frames` iterations as a node, each processor's
    explicit sequence of rounds (entries of missing iterations skipped) as a chain, the data
    channels' token dependencies as edges; start times by longest paths (networkx). Period from
    the ends of two late iterations. ValueError if the unfolded graph has a cycle."""
    q = repetition_vector(g)
    time = {a.name: a.exec_times for a in g.actors}
    dag = nx.DiGraph()

    def end(a, i, k):
        return ("end", a, i, k)

    for a in g.actors:
        for k in range(frames):
            for i in range(q[a.name]):
                dag.add_edge(("start", a.name, i, k), end(a.name, i, k),
                             w=time[a.name][i % a.phases])
    for order in orders.values():
        low = min(f.frame_offset for f in order)
        high = max(f.frame_offset for f in order)
        seq = [(f.actor, f.firing, r + f.frame_offset) for r in range(-high, frames - low)
               for f in order if 0 <= r + f.frame_offset < frames]
        for (a, i, k), (b, j, m) in zip(seq, seq[1:]):
            dag.add_edge(end(a, i, k), ("start", b, j, m), w=0.0)
    for c in g.channels:
        produced = [0]
        for i in range(q[c.src] * frames):
            produced.append(produced[-1] + c.production[i % len(c.production)])
        consumed = 0
        for n in range(q[c.dst] * frames):
            consumed += c.consumption[n % len(c.consumption)]
            need = consumed - c.initial_tokens
            if c.consumption[n % len(c.consumption)] == 0 or need <= 0:
                continue
            f = next(i for i in range(len(produced) - 1) if produced[i + 1] >= need)
            u, v = end(c.src, f % q[c.src], f // q[c.src]), ("start", c.dst, n % q[c.dst],
                                                               n // q[c.dst])
            w = max(c.transfer_time, dag.edges[u, v]["w"] if dag.has_edge(u, v) else 0.0)
            dag.add_edge(u, v, w=w)
    if not nx.is_directed_acyclic_graph(dag):
        raise ValueError("deadlock")
    start: dict = {}
    for v in nx.topological_sort(dag):
        start.setdefault(v, 0.0)
        for _, u, e in dag.out_edges(v, data=True):
            start[u] = max(start.get(u, 0.0), start[v] + e["w"])
    def done(k):  # the last end of iteration k (without back-pressure actors drift apart)
        return max(start[end(a.name, i, k)] for a in g.actors for i in range(q[a.name]))

    k1, k2 = frames // 3, frames - 40
    return (done(k2) - done(k1)) / (k2 - k1)


@settings(max_examples=40, deadline=None)
@given(csdf_graphs(mapped=False, max_actors=4), st.integers(0, 2**32 - 1))
def test_random_firing_orders_agree_with_an_unfolded_schedule(g, seed):
    rng = random.Random(seed)
    for a in g.actors:  # one actor per processor, run in the processor's firing order
        a.concurrency, a.processor = 1, a.name
    for c in g.channels:
        c.capacity = None
    q = repetition_vector(g)
    orders = {}
    for a in g.actors:
        offsets = sorted((rng.randint(0, 2) for _ in range(q[a.name])), reverse=True)
        orders[a.name] = tuple(Firing(a.name, i, o) for i, o in enumerate(offsets))
    try:
        expected = unfolded_period(g, orders)
    except ValueError:
        with pytest.raises(DeadlockError):
            throughput_mcr(g, orders)
        return
    assert throughput_mcr(g, orders).period == pytest.approx(expected, rel=0.03, abs=1e-9)


def assert_simulation_equals_mcr(g, orders):
    """Both analyses find the same period, or both a deadlock."""
    try:
        expected = throughput_mcr(g, orders).period
    except DeadlockError:
        with pytest.raises(DeadlockError):
            throughput_simulation(g, orders=orders)
        return
    assert throughput_simulation(g, orders=orders).period == pytest.approx(expected, rel=1e-9,
                                                                            abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(csdf_graphs(mapped=False, max_actors=4), st.integers(0, 2**32 - 1))
def test_the_simulation_with_firing_orders_equals_the_mcr(g, seed):
    """Random graphs (bounded channels included), each actor on its own processor with a random
    firing order: its firings in any order, each at a random frame offset."""
    rng = random.Random(seed)
    for a in g.actors:
        a.concurrency, a.processor = 1, a.name
    q = repetition_vector(g)
    orders = {}
    for a in g.actors:
        firings = list(range(q[a.name]))
        rng.shuffle(firings)
        orders[a.name] = tuple(Firing(a.name, i, rng.randint(0, 2)) for i in firings)
    assert_simulation_equals_mcr(g, orders)


@settings(max_examples=150, deadline=None)
@given(csdf_graphs(mapped=False, max_actors=5), st.integers(0, 2**32 - 1))
def test_the_simulation_and_the_mcr_agree_on_shared_processors(g, seed):
    """Several actors on one processor, its firing order a random interleaving of all their
    firings at random frame offsets (most such orders deadlock: both analyses must say so)."""
    rng = random.Random(seed)
    procs = max(1, len(g.actors) - rng.randint(0, 2))
    for a in g.actors:
        a.concurrency, a.processor = 1, f"p{rng.randrange(procs)}"
    q = repetition_vector(g)
    orders = {}
    for p in sorted({a.processor for a in g.actors}):
        firings = [(a.name, i) for a in g.actors if a.processor == p for i in range(q[a.name])]
        rng.shuffle(firings)
        orders[p] = tuple(Firing(name, i, rng.randint(0, 2)) for name, i in firings)
    assert_simulation_equals_mcr(g, orders)
