"""The planner chooses lanes and a batch per GPU element on synthetic profiles (no GPU): where
the profile's t(b, k) gives twice the rate at batch 8, the plan is batched and predicted about
twice the unbatched; where a batch costs b frames' runs it stays at batch 1."""
import dataclasses

import pytest

from hetflow.mapping.from_profile import with_batches
from hetflow.mapping.lanes import fit_lanes
from hetflow.mapping.planner import copies_design, search_plan
from hetflow.mapping.problem import evaluate
from hetflow.mapping.strategies.base import whole_model_on
from hetflow.plan.mapping import describe_design
from synthetic_server import synthetic_problem

CURVE = {1: 1.0, 2: 1.6, 4: 3.0}  # k / slowdown: 1, 1.25, 1.33
BATCHES = (1, 2, 4, 8)


def fake_batch_table(t1: float, affine: float) -> dict:
    """gpu_batches[element] of a GPU whose firing of b frames at k lanes takes
    t1 * CURVE[k] * (affine + (1 - affine) * b)."""
    return {f"{b},{k}": {"alone": {"median": t1 * s * (affine + (1 - affine) * b)},
                         "busy": {"median": 1.1 * t1 * s * (affine + (1 - affine) * b)},
                         "memory_bytes": (64 << 20) * b}
            for k, s in CURVE.items() for b in BATCHES}


def server(affine: float, call_overhead: float = 0.0):
    """Two cores and a GPU 40x one; the engine's cost per firing, which a batch pays once for
    b frames, `call_overhead`."""
    p = synthetic_problem("squeezenet1_0", n_cores=2, gpu_speedup=40.0)
    p = dataclasses.replace(p, lane_slowdown={"gpu0": dict(CURVE)}, call_overhead=call_overhead)
    t1 = p.actor_time([l.name for l in p.graph.layers], "gpu0")
    return with_batches(p, {"gpu0": fake_batch_table(t1, affine)})


# 8 / (a + 8 (1 - a)) = 2 at a = 4/7: batch 8 runs twice the frames a second of batch 1
@pytest.mark.parametrize("strategy", ["single", "greedy"])
def test_a_batch_that_doubles_the_rate_is_planned(strategy):
    p = server(affine=4 / 7)
    plan, _ = search_plan(p, strategy, "synthetic")
    assert plan.mapping.batch_of("gpu0") == 8
    unbatched = evaluate(p, dataclasses.replace(plan.mapping, batch={}))
    assert plan.predicted["throughput"] == pytest.approx(2 * unbatched.throughput, rel=0.15)
    assert plan.predicted["batch"] == {"gpu0": 8}
    assert " b8" in describe_design(plan.app.phases, plan.mapping.lanes, plan.mapping.batch)
    # the a priori prediction is the run's analysis of the plan as written
    assert evaluate(p, plan.mapping).throughput == pytest.approx(plan.predicted["throughput"])


def test_a_batch_that_gains_nothing_is_not_planned():
    p = server(affine=0.0)  # b frames cost b runs
    plan, _ = search_plan(p, "single", "synthetic")
    assert plan.mapping.batch_of("gpu0") == 1 and plan.mapping.batch == {}


def test_a_batch_pays_the_engine_cost_of_a_firing_once():
    # b frames cost b runs, but the engine's cost of a firing is paid once for them
    p = server(affine=0.0, call_overhead=30e-6)
    fitted, _ = fit_lanes(p, whole_model_on(p, "gpu0"))
    assert fitted.batch_of("gpu0") > 1


def test_a_gpu_among_cpu_copies_is_batched_as_it_is_alone():
    """A batched GPU's lanes take blocks of consecutive frames from its group, so beside the
    cores it is batched as alone, and the group runs the cores' rate more."""
    p = server(affine=4 / 7)
    group = whole_model_on(p, "gpu0")
    assert fit_lanes(p, group)[0].batch_of("gpu0") == 8
    mixed, both = fit_lanes(p, dataclasses.replace(
        group, assignment={l: "cpu0|cpu1|gpu0" for l in group.assignment}, batch={}, lanes={}))
    assert mixed.batch_of("gpu0") == 8
    solo = evaluate(p, dataclasses.replace(group, lanes=mixed.lanes, batch=mixed.batch))
    whole = [l.name for l in p.graph.layers]
    cores = sum(1 / (p.actor_time(whole, c) + p.call_overhead) for c in ("cpu0", "cpu1"))
    assert both.throughput == pytest.approx(solo.throughput + cores, rel=1e-6)


def test_the_plan_is_the_gpu_batched_beside_the_cores_where_that_is_fastest():
    """The single strategy scores its designs at batch 1; the group of the cores and the GPU
    is not given up for the GPU alone batched, since the group with its GPU batched is faster
    still, and the plan runs it so."""
    p = server(affine=4 / 7)
    plan, result = search_plan(p, "single", "synthetic")
    assert plan.mapping.actors == ["cpu0|cpu1|gpu0"] and plan.mapping.batch_of("gpu0") == 8
    assert "whole_model_won" not in result.notes
    alone, solo = fit_lanes(p, whole_model_on(p, "gpu0"))
    assert plan.predicted["throughput"] > solo.throughput
    # the parallel copies' design, every search's candidate, is the practitioner's: batched
    copies, metrics = copies_design(p)
    assert copies.batch_of("gpu0") == 8 and copies.key() == plan.mapping.key()
    assert metrics.throughput == pytest.approx(plan.predicted["throughput"])


def test_a_latency_cap_pays_for_the_fill():
    p = server(affine=4 / 7)
    free, _ = search_plan(p, "single", "synthetic")
    design = dataclasses.replace(free.mapping, batch={})
    # the batched plan's latency holds its batch's fill at its rate: 7 frames' arrival
    fill = (8 - 1) / free.predicted["throughput"]
    assert free.predicted["latency"] >= fill
    cap = free.predicted["latency"] - 0.5 * fill  # a smaller batch fills in time
    fitted, metrics = fit_lanes(p, design, latency_cap=cap)
    assert metrics.latency <= cap
    assert 1 < fitted.batch_of("gpu0") < 8


def test_the_front_holds_each_batch_as_its_plan_runs_it():
    """A strategy scores the GPU at batch 1; the front a user runs (`fitted_front`) holds the
    batches between, each design's metrics its plan's analysis, and none dominated by
    another batch of the same design (an oracle: every batch evaluated here apart)."""
    from hetflow.mapping.pareto import non_dominated
    from hetflow.mapping.planner import fitted_front, make_plan
    from hetflow.mapping.strategies.base import SearchResult

    p = server(affine=4 / 7)
    gpu = whole_model_on(p, "gpu0")
    result = SearchResult(best=gpu, metrics=evaluate(p, gpu))
    front = fitted_front(p, result)
    batches = [m.batch_of("gpu0") for m, _ in front]
    assert len(front) >= 3 and len(set(batches)) == len(batches)
    for mapping, metrics in front:
        assert metrics.throughput == pytest.approx(evaluate(p, mapping).throughput)
        plan = make_plan(p, mapping, metrics, "single", "synthetic")
        assert plan.mapping.batch_of("gpu0") == mapping.batch_of("gpu0")  # b1 stays b1
        assert plan.predicted["throughput"] == pytest.approx(metrics.throughput)
    every = [fit_lanes(p, dataclasses.replace(gpu, batch={"gpu0": b}))[1] for b in BATCHES]
    points = [(m.throughput, m.latency) for m in every]
    kept = {(round(m.throughput, 6), round(m.latency, 9))
            for m in (every[i] for i in non_dominated(points))}
    assert {(round(m.throughput, 6), round(m.latency, 9)) for _, m in front} == kept


@pytest.mark.parametrize("max_batch", [1, 2, 4])
def test_max_batch_keeps_the_plan_at_or_below_it(max_batch):
    """`--max-batch`: the profile's batch tables cut (`Profile.up_to_batch`), the planner that
    chose batch 8 above chooses no more than the cut."""
    from hetflow.profile.profile import Profile

    p = synthetic_problem("squeezenet1_0", n_cores=2, gpu_speedup=40.0)
    p = dataclasses.replace(p, lane_slowdown={"gpu0": dict(CURVE)})
    t1 = p.actor_time([l.name for l in p.graph.layers], "gpu0")
    prof = Profile("m", "h", "p", "ph", gpu_batches={"gpu0": {
        **fake_batch_table(t1, 4 / 7), "seconds": {"batch 8": 1.0}}})
    cut = prof.up_to_batch(max_batch)
    assert cut.gpu_batches["gpu0"]["seconds"] == {"batch 8": 1.0}  # the table's notes stay
    plan, _ = search_plan(with_batches(p, cut.gpu_batches), "single", "synthetic")
    assert plan.mapping.batch_of("gpu0") <= max_batch
    assert plan.mapping.batch_of("gpu0") == max_batch  # a larger batch runs faster here
    assert prof.up_to_batch(None) is prof
    with pytest.raises(Exception, match="--max-batch 0"):
        prof.up_to_batch(0)
