"""Latency: hand-worked cases (see latency.py for the definitions)."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

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


# ---- with frame-interleaved firing orders ------------------------------------------------------
def round_trip() -> CsdfGraph:
    """a fires twice per frame, b between: a0 -> b -> a1."""
    return CsdfGraph("rt", [Actor("a", [1.0, 1.0], processor="a"),
                            Actor("b", [1.0], processor="b")],
                     [Channel("c1", "a", "b", [1, 0], [1], 0, None, 0.0),
                      Channel("c2", "b", "a", [1], [0, 1], 0, None, 0.0)])


def test_interleaving_trades_latency_for_period():
    # frame by frame, a waits for b: 3 s a frame. Interleaved, round r runs a0 of frame r+1 and
    # a1 of frame r: 2 s a frame, and frame r runs from a0 at 2r-2 to a1's end at 2r+2
    from hetflow.dataflow.analysis.orders import Firing

    orders = {"a": (Firing("a", 0, 1), Firing("a", 1, 0))}
    plain, inter = latency(round_trip()), latency(round_trip(), orders=orders)
    assert (plain.period, plain.steady) == (3.0, 3.0)
    assert (inter.period, inter.steady, inter.isolated) == (2.0, 4.0, 3.0)
    # with inputs 5 s apart a strict order makes a1 of frame r wait for a0 of frame r + 1,
    # which cannot start before its input at 5r + 5: 7 s (frame by frame it would be 3)
    assert latency(round_trip(), period=5.0, orders=orders).steady == 7.0
    assert latency(round_trip(), period=5.0).steady == 3.0


def simulated_latency(g: CsdfGraph, offsets: dict[str, list[int]], period: float,
                      frames: int = 80, k: int = 1) -> float:
    """An independent oracle for graphs whose channels move one token per frame from one phase
    to one phase: run every actor's rounds (round r fires phase p of frames (r + offset[p]) * k
    + j, j < k; actors without offsets frame by frame) as early as data, its own previous firing
    and the source clock (the first frame of each round of k, `period` per round) allow; the
    largest latency of a round of k frames over the second half of the run."""
    q = {a.name: len(a.exec_times) for a in g.actors}
    seq = {}
    for a in q:
        if a in offsets:
            o_ = offsets[a]
            seq[a] = [(j, p) for r in range(-o_[0], frames) for p, o in enumerate(o_)
                      for j in range((r + o) * k, (r + o + 1) * k) if 0 <= j < frames]
        else:
            seq[a] = [(f, p) for f in range(frames) for p in range(q[a])]
    needs: dict[tuple[str, int], list] = {}
    for c in g.channels:
        i, j = c.production.index(1), c.consumption.index(1)
        needs.setdefault((c.dst, j), []).append((c.src, i, c.transfer_time))
    fed = {c.dst for c in g.channels if c.src != c.dst}
    sources = [a for a in q if a not in fed] or list(q)
    time = {a.name: a.exec_times for a in g.actors}
    start, end, free, pos = {}, {}, {a: 0.0 for a in q}, {a: 0 for a in q}
    while any(pos[a] < len(seq[a]) for a in q):
        moved = False
        for a in q:
            while pos[a] < len(seq[a]):
                f, p = seq[a][pos[a]]
                deps = needs.get((a, p), [])
                if any((s, i, f) not in end for s, i, _ in deps):
                    break
                t = max([free[a]] + [end[(s, i, f)] + d for s, i, d in deps]
                        + ([f // k * period] if a in sources and p == 0 and f % k == 0
                           else []))
                start[(a, p, f)], end[(a, p, f)] = t, t + time[a][p]
                free[a], pos[a], moved = t + time[a][p], pos[a] + 1, True
        assert moved, "the oracle's schedule deadlocked"
    rounds = range(frames // k // 2, frames // k)
    return max(max(end[(a, p, f)] for a in q for p in range(q[a]) for f in range(r * k, r * k + k))
               - min(start[(a, 0, f)] for a in sources for f in range(r * k, r * k + k))
               for r in rounds)


@st.composite
def round_trip_graphs(draw):
    """Actors with 1-3 phases; a frame visits them in a random order consistent with each
    actor's phase order, a channel between each two consecutive visits of different actors."""
    n = draw(st.integers(2, 3))
    q = [draw(st.integers(1, 3)) for _ in range(n)]
    visits = draw(st.permutations([a for a in range(n) for _ in range(q[a])]))
    seen, order = [0] * n, []
    for a in visits:
        order.append((a, seen[a]))
        seen[a] += 1
    channels = []
    for (a, i), (b, j) in zip(order, order[1:]):
        if a != b:
            prod, cons = [0] * q[a], [0] * q[b]
            prod[i], cons[j] = 1, 1
            channels.append(Channel(f"c{len(channels)}", f"x{a}", f"x{b}", prod, cons, 0, None,
                                    float(draw(st.integers(0, 2)))))
    actors = [Actor(f"x{a}", [float(draw(st.integers(1, 5))) for _ in range(q[a])],
                    processor=f"x{a}") for a in range(n)]
    offsets = {}
    for a in range(n):
        steps = draw(st.lists(st.integers(0, 1), min_size=q[a] - 1, max_size=q[a] - 1))
        offsets[f"x{a}"] = [sum(steps[i:]) for i in range(q[a] - 1)] + [0]
    return CsdfGraph("trips", actors, channels), offsets


@settings(max_examples=60, deadline=None)
@given(round_trip_graphs())
def test_latency_with_firing_orders_matches_a_simulation(case):
    from hetflow.dataflow.analysis.orders import Firing
    from hetflow.errors import DeadlockError

    g, offsets = case
    orders = {a: tuple(Firing(a, i, o) for i, o in enumerate(offs))
              for a, offs in offsets.items() if any(offs)}
    try:
        period = throughput_mcr(g, orders or None).period
    except DeadlockError:
        return  # (unbounded channels: an order deadlocks only by waiting for its own later frame)
    r = latency(g, orders=orders or None)
    assert r.period == pytest.approx(period)
    assert r.steady == pytest.approx(simulated_latency(g, offsets, period))
    slower = latency(g, period=period * 1.5, orders=orders or None)  # paced by the input
    assert slower.steady == pytest.approx(simulated_latency(g, offsets, period * 1.5))


@settings(max_examples=40, deadline=None)
@given(round_trip_graphs(), st.integers(2, 3))
def test_rounds_of_several_frames_match_a_simulation(case, k):
    """Every actor fires phase p of the round's k frames before phase p + 1 (no offsets): the
    unfolded graph's period is k frames' and its latency a round's."""
    from hetflow.dataflow.analysis.orders import Firing, unfolded

    g, offsets = case
    q = {a.name: len(a.exec_times) for a in g.actors}
    orders = {a: tuple(Firing(a, j * q[a] + p, 0) for p in range(q[a]) for j in range(k))
              for a in q}
    u = unfolded(g, k)
    period = throughput_mcr(u, orders).period
    zero = {a: [0] * q[a] for a in q}
    assert latency(u, orders=orders).steady == pytest.approx(
        simulated_latency(g, zero, period, frames=40 * k, k=k))


@settings(max_examples=40, deadline=None)
@given(csdf_graphs())
def test_isolated_latency_is_latencys_own(g):
    from hetflow.dataflow.analysis.latency import isolated_latency
    from hetflow.errors import DeadlockError

    try:
        want = latency(g).isolated
    except (DeadlockError, InputError):
        return
    assert isolated_latency(g) == pytest.approx(want)


# ---- fed as fast as it goes (sources not clocked) ----------------------------------------------
def test_saturated_latency_waits_in_front_of_the_slowest_stage():
    # a (1 s) -> b (2 s), FIFO of c frames: a runs ahead until b has not started frame f - c,
    # so frame f starts 2c s before b takes it: 2c + 2 (the clocked latency stays 3)
    from hetflow.dataflow.analysis import saturated_latency

    for c in (1, 2, 4):
        assert saturated_latency(chain([1.0, 2.0], capacity=c)) == 2 * c + 2
        assert latency(chain([1.0, 2.0], capacity=c)).steady == 3.0
    # the slowest stage first: nothing waits
    assert saturated_latency(chain([2.0, 1.0], capacity=2)) == 3.0
    # nothing holds the source back: the backlog grows without bound
    assert math.isinf(saturated_latency(chain([1.0, 2.0])))


def chain_oracle(times: list[float], capacity: int, transfer: float, frames: int = 120) -> float:
    """An independent oracle for a chain with FIFOs of `capacity` frames (a producer starts frame
    f once its consumer has started frame f - capacity) and one firing at a time per actor,
    every firing as early as it may: the largest latency over the second half of the frames."""
    n = len(times)
    start = [[0.0] * frames for _ in range(n)]
    end = [[0.0] * frames for _ in range(n)]
    for f in range(frames):
        for i in range(n):
            t = end[i][f - 1] if f else 0.0
            if i:
                t = max(t, end[i - 1][f] + transfer)
            if i < n - 1 and f >= capacity:
                t = max(t, start[i + 1][f - capacity])
            start[i][f], end[i][f] = t, t + times[i]
    return max(end[-1][f] - start[0][f] for f in range(frames // 2, frames))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=2, max_size=4), st.integers(1, 3),
       st.integers(0, 2))
def test_saturated_latency_of_a_chain_matches_a_simulation(times, capacity, transfer):
    from hetflow.dataflow.analysis import saturated_latency

    g = chain([float(t) for t in times], capacity=capacity, transfer=float(transfer))
    assert saturated_latency(g) == pytest.approx(
        chain_oracle([float(t) for t in times], capacity, float(transfer)))
