"""Searches score designs as their plans run them: a design with round trips (GPU -> CPU ->
GPU: the GPU runs a frame's head and tail with the CPU's work in between) is ranked by its rate
with interleaved phase orders, and kept over every pipeline wherever that rate beats theirs.

The profiles are synthetic layer-time tables of a chain CNN on a GPU and a CPU cluster: the GPU
is 3x, 5x or 10x the cluster on most layers, and no faster on the layers the cluster is
relatively good at. The oracle is independent of the searches: it enumerates every pipeline
(contiguous cuts of the layer order, one element a stage) and every round trip (the cluster
takes one contiguous run of middle layers), and analyses each round trip interleaved by giving
it the orders itself (the GPU fires the head of frame f + 1 before the tail of frame f, or
rounds of two frames) and calling the analysis (`evaluate`), not the searches' scoring.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

from hetflow.plan.mapping import Mapping, group_name, weighted_pattern
from hetflow.mapping.planner import search_plan
from hetflow.mapping.problem import Problem, build_app, evaluate
from hetflow.mapping.strategies import exhaustive, ga, ilp, moo
from hetflow.model.reader import normalise, to_cnn_graph
from hetflow.platform.spec import ProcessingElement

GPU, CPU = "gpu0", "cpu0-3"
# choose_interleave keeps, among orders within 5% of the fastest, the one of lowest latency:
# a round trip beating every other design by more than this wins whichever it keeps
MARGIN = 1.06


def chain_graph(n: int):
    """A chain of `n` 3x3 convolutions (4 channels, 8x8): every cut is a pipeline boundary."""
    rng = np.random.default_rng(n)
    nodes, inits, prev = [], [], "input"
    for i in range(n):
        w = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32),
                                    f"w{i}")
        inits.append(w)
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"t{i}"], name=f"l{i}",
                                      kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        prev = f"t{i}"
    io = [helper.make_tensor_value_info(t, TensorProto.FLOAT, [1, 4, 8, 8])
          for t in ("input", prev)]
    model = helper.make_model(helper.make_graph(nodes, f"chain{n}", io[:1], io[1:], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    g = to_cnn_graph(normalise(model, f"chain{n}", {}), f"chain{n}")
    g.model_hash = f"chain-{n}"
    return g


def table_problem(work: list[float], cpu_good: list[bool], speedup: float,
                  transfer) -> Problem:
    """Layer times: `work` on the CPU cluster; on the GPU, work / `speedup`, but no faster than
    the cluster on the layers marked `cpu_good`."""
    graph = chain_graph(len(work))
    elements = [ProcessingElement(GPU, "gpu", (4,), device_index=0, model="gpu"),
                ProcessingElement(CPU, "cpu", (0, 1, 2, 3), cluster="a57")]
    cpu = np.array(work)
    gpu = np.where(cpu_good, cpu, cpu / speedup)
    return Problem(graph, elements, np.column_stack([gpu, cpu]), transfer(elements))


def layers_of(p: Problem) -> list[str]:
    return [l.name for l in p.graph.layers]


def best_without_round_trips(p: Problem, data_parallel: bool) -> float:
    """The best analysed rate of every pipeline (the whole model on one element, or a cut with
    each side on its own element) and, with `data_parallel`, of the whole model on both
    elements taking frames in proportion to their speeds."""
    layers, n = layers_of(p), len(p.graph.layers)
    designs = [Mapping({l: e for l in layers}) for e in (GPU, CPU)]
    designs += [Mapping({l: (a if i < cut else b) for i, l in enumerate(layers)})
                for cut in range(1, n) for a, b in ((GPU, CPU), (CPU, GPU))]
    if data_parallel:
        times = [p.actor_time(layers, e) + p.call_overhead for e in (GPU, CPU)]
        actor = group_name([GPU, CPU])
        designs.append(Mapping({l: actor for l in layers},
                               dispatch={actor: weighted_pattern(times)}))
    return max(evaluate(p, m, with_latency=False).throughput for m in designs)


def interleaved_rate(p: Problem, mapping: Mapping) -> float:
    """The analysed rate of a round trip with the two orders a plan may give it, the faster."""
    outer = mapping.assignment[layers_of(p)[0]]
    rates = [evaluate(p, Mapping(mapping.assignment, interleave={outer: [1, 0]}),
                      with_latency=False).throughput,
             evaluate(p, Mapping(mapping.assignment, interleave={outer: [0, 0]},
                                 round_frames=2), with_latency=False).throughput]
    return max(rates)


def best_round_trip(p: Problem) -> tuple[Mapping, float]:
    """The fastest round trip (one element runs a frame's head and tail, the other a run of
    middle layers) interleaved."""
    layers, n = layers_of(p), len(p.graph.layers)
    out = []
    for i in range(1, n - 1):
        for j in range(i + 1, n):
            for outer, inner in ((GPU, CPU), (CPU, GPU)):
                m = Mapping({l: (inner if i <= k < j else outer) for k, l in enumerate(layers)})
                out.append((m, interleaved_rate(p, m)))
    return max(out, key=lambda x: x[1])


def has_round_trip(p: Problem, mapping: Mapping) -> bool:
    """Some actor's frame leaves it and comes back (it runs several phases)."""
    return any(len(ps) > 1 for ps in build_app(p, mapping).phases.values())


def check_kept(p: Problem, mapping: Mapping, throughput: float, baseline: float) -> None:
    """`mapping` has round trips, runs interleaved, beats `baseline` and is predicted as the
    analysis predicts it."""
    assert has_round_trip(p, mapping), mapping.assignment
    assert mapping.interleave, "a design with round trips returned in frame order"
    assert throughput >= baseline * (1 - 1e-9)
    assert evaluate(p, mapping).throughput == pytest.approx(throughput, rel=1e-9)


def middle_block(n: int, start: int, length: int) -> list[bool]:
    return [start <= i < start + length for i in range(n)]


# (speedup, layers, cluster-friendly block start, its length): the block sits in the middle,
# where only a round trip gives it to the cluster alone
TABLES = [(3.0, 8, 3, 2), (5.0, 9, 3, 3), (10.0, 10, 4, 3), (10.0, 8, 2, 4), (5.0, 10, 2, 2)]


@pytest.fixture(scope="module")
def tables(factory):
    out = []
    for speedup, n, start, length in TABLES:
        work = list(np.random.default_rng(n * 7 + start).uniform(0.5e-3, 2e-3, n))
        p = table_problem(work, middle_block(n, start, length), speedup, factory.transfer)
        out.append((speedup, p, best_round_trip(p)))
    return out


def test_the_tables_hold_round_trips_that_beat_every_pipeline(tables):
    # otherwise the tests below would check nothing
    wins = [s for s, p, (_, rate) in tables if rate > MARGIN * best_without_round_trips(p, True)]
    assert {3.0, 5.0, 10.0} <= set(wins)


@pytest.mark.parametrize("i", range(len(TABLES)))
def test_exhaustive_keeps_a_round_trip_wherever_it_beats_every_pipeline(tables, i):
    _, p, (_, rate) = tables[i]
    baseline = best_without_round_trips(p, data_parallel=False)
    res = exhaustive.search(p)
    assert res.metrics.throughput >= rate * 0.95 * (1 - 1e-9)  # within the latency trade
    if rate > MARGIN * baseline:
        check_kept(p, res.best, res.metrics.throughput, baseline)


@pytest.mark.parametrize("i", range(len(TABLES)))
def test_the_ga_keeps_a_round_trip_wherever_it_beats_every_other_design(tables, i):
    _, p, (_, rate) = tables[i]
    baseline = best_without_round_trips(p, data_parallel=True)  # the GA's seeds hold it
    res = ga.search(p, seed=i, fitness="throughput")
    if rate > MARGIN * baseline:
        check_kept(p, res.best, res.metrics.throughput, baseline)
        assert res.metrics.throughput >= rate * 0.95 * (1 - 1e-9)


@pytest.mark.parametrize("i", [1, 2])
def test_nsga2_ranks_round_trips_by_their_interleaved_objectives(tables, i):
    _, p, (_, rate) = tables[i]
    baseline = best_without_round_trips(p, data_parallel=False)
    res = moo.nsga2(p, seed=i, generations=10)
    if rate > MARGIN * baseline:
        check_kept(p, res.best, res.metrics.throughput, baseline)
    for mapping, metrics in res.front:  # each design's objectives are its own analysis
        again = evaluate(p, mapping)
        assert (again.throughput, again.latency) == pytest.approx(
            (metrics.throughput, metrics.latency), rel=1e-9)


@pytest.mark.parametrize("i", range(len(TABLES)))
def test_a_plan_keeps_the_ilp_round_trip_where_it_beats_the_whole_model(tables, i):
    # the ILP's clusters (a PE may hold the first and the last) have round trips; the whole
    # model check compares them interleaved, so it no longer swaps them for the GPU alone
    _, p, _ = tables[i]
    clustered = ilp.search(p, interleave=False).best
    plan, result = search_plan(p, "ilp", "synthetic")
    whole = max(evaluate(p, Mapping({l: e for l in layers_of(p)})).throughput
                for e in (GPU, CPU))
    if has_round_trip(p, clustered) and interleaved_rate(p, clustered) > MARGIN * whole:
        assert "whole_model_won" not in result.notes
        assert plan.mapping.assignment == clustered.assignment
        check_kept(p, plan.mapping, plan.predicted["throughput"], whole)
    assert plan.predicted["throughput"] == pytest.approx(
        evaluate(p, plan.mapping).throughput, rel=1e-9)


def test_the_ilp_tables_exercise_a_kept_round_trip(tables):
    kept = 0
    for _, p, _ in tables:
        m = ilp.search(p, interleave=False).best
        whole = max(evaluate(p, Mapping({l: e for l in layers_of(p)})).throughput
                    for e in (GPU, CPU))
        kept += has_round_trip(p, m) and interleaved_rate(p, m) > MARGIN * whole
    assert kept >= 2


@pytest.mark.parametrize("strategy,options", [("exhaustive", {}),
                                              ("ga", {"fitness": "throughput"})])
def test_a_plan_of_a_round_trip_carries_its_interleaved_prediction(tables, strategy, options):
    _, p, (_, rate) = tables[2]  # GPU 10x the cluster: the round trip wins
    plan, result = search_plan(p, strategy, "synthetic", **options)
    assert plan.mapping.interleave and result.best.key() == plan.mapping.key()
    assert plan.predicted["throughput"] == pytest.approx(result.metrics.throughput, rel=1e-9)
    assert plan.predicted["throughput"] == pytest.approx(evaluate(p, plan.mapping).throughput,
                                                         rel=1e-9)
    # without interleaving the search scores frame order, which pays every round trip
    plain, _ = search_plan(p, strategy, "synthetic", interleave=False, **options)
    assert not plain.mapping.interleave
    assert plain.predicted["throughput"] < plan.predicted["throughput"]


@settings(max_examples=12, deadline=None)
@given(n=st.integers(4, 8), speedup=st.sampled_from([3.0, 5.0, 10.0]), data=st.data())
def test_exhaustive_keeps_round_trips_on_random_tables(factory, n, speedup, data):
    work = data.draw(st.lists(st.floats(0.2e-3, 3e-3), min_size=n, max_size=n))
    cpu_good = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    p = table_problem(work, cpu_good, speedup, factory.transfer)
    baseline = best_without_round_trips(p, data_parallel=False)
    _, rate = best_round_trip(p)
    res = exhaustive.search(p)
    assert res.metrics.throughput >= max(baseline, rate * 0.95) * (1 - 1e-9)
    if rate > MARGIN * baseline:
        check_kept(p, res.best, res.metrics.throughput, baseline)


def test_a_plan_keeps_the_interleaved_gpu_at_one_lane(tables):
    # lanes would run frames beside each other on the GPU, which its interleaved order forbids
    from dataclasses import replace

    from hetflow.plan.orders import check_interleave

    _, p, _ = tables[2]
    p = replace(p, lane_slowdown={GPU: {1: 1.0, 2: 2.0, 4: 4.0}})
    plan, result = search_plan(p, "exhaustive", "synthetic")
    assert GPU in plan.mapping.interleave and plan.mapping.lanes_of(GPU) == 1
    check_interleave(plan.mapping, plan.app)
    assert plan.predicted["throughput"] == pytest.approx(evaluate(p, plan.mapping).throughput,
                                                         rel=1e-9)
