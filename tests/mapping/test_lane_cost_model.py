"""GPU lanes in the cost model: a GPU element with k lanes is an actor with concurrency k whose
firing takes its one-lane time times the measured slowdown at k; plans take the fewest lanes
that keep the best predicted throughput; lanes on a CPU element or beyond the device memory are
refused naming the element."""
import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from hetflow.errors import InputError
from hetflow.mapping.lanes import check_lanes, fit_lanes
from hetflow.plan.mapping import Mapping
from hetflow.mapping.planner import search_plan
from hetflow.mapping.problem import evaluate

CURVE = {1: 1.0, 2: 1.25, 4: 1.8, 8: 3.6}  # k/s(k): 1, 1.6, 2.22, 2.22 -> best 4 (fewest)


def gpu_problem(factory, n_cpu=2, **curves):
    p = factory.problem(6, factory.elements(n_cpu, 1), call_overhead=0.0)
    p.lane_slowdown["gpu0"] = dict(curves.get("alone", CURVE))
    if "busy" in curves:
        p.lane_slowdown_busy["gpu0"] = dict(curves["busy"])
    return p


def whole(p, actor):
    return Mapping({l.name: actor for l in p.graph.layers})


def test_slowdown_interpolates_and_caps_the_rate_past_the_last_measured_count(factory):
    p = gpu_problem(factory)
    assert p.slowdown("gpu0", 4, busy=False) == 1.8
    assert p.slowdown("gpu0", 3, busy=False) == pytest.approx((1.25 + 1.8) / 2)
    # 16 lanes: no more frames per second than 8 gave
    assert 16 / p.slowdown("gpu0", 16, busy=False) == pytest.approx(8 / 3.6)
    assert p.slowdown("cpu0", 1, busy=True) == 1.0
    assert p.best_lanes("gpu0") == 4


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_gpu_only_throughput_is_k_over_the_slowed_firing(factory, k):
    p = gpu_problem(factory)
    layers = [l.name for l in p.graph.layers]
    t1 = p.actor_time(layers, "gpu0")
    m = whole(p, "gpu0")
    m.lanes = {"gpu0": k}
    assert evaluate(p, m).throughput == pytest.approx(k / (t1 * CURVE[k]), rel=1e-6)
    assert evaluate(p, m).lanes == {"gpu0": k}


def test_a_mapping_without_lanes_is_analysed_at_the_best_count(factory):
    p = gpu_problem(factory)
    m = whole(p, "gpu0")
    best = max((evaluate(p, Mapping(m.assignment, lanes={"gpu0": k})).throughput for k in CURVE))
    assert evaluate(p, m).throughput == pytest.approx(best)


def test_the_busy_curve_is_used_when_other_elements_work_too(factory):
    busy = {1: 1.5, 2: 2.0, 4: 3.0, 8: 6.0}
    p = gpu_problem(factory, alone=CURVE, busy=busy)
    layers = [l.name for l in p.graph.layers]
    # a weighted group of the GPU (4 lanes) and two CPU cores, dynamic dispatch: rates add
    m = Mapping({l: "gpu0|cpu0|cpu1" for l in layers}, lanes={"gpu0": 4})
    t_gpu = p.actor_time(layers, "gpu0") * busy[4]
    rates = 4 / t_gpu + sum(1 / p.actor_time(layers, c) for c in ("cpu0", "cpu1"))
    assert evaluate(p, m).throughput == pytest.approx(rates, rel=1e-6)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 500), a=st.floats(1.0, 2.0), b=st.floats(1.0, 2.0), c=st.floats(1.0, 2.5))
def test_fit_lanes_takes_the_fewest_lanes_within_tolerance_of_the_best(factory, seed, a, b, c):
    curve = {1: 1.0, 2: a, 4: a * b, 8: a * b * c}
    p = factory.problem(5, factory.elements(1, 1), seed=seed)
    p.lane_slowdown["gpu0"] = curve
    m = whole(p, "gpu0")
    fitted, metrics = fit_lanes(p, m)
    k = fitted.lanes["gpu0"]
    rates = {j: evaluate(p, Mapping(m.assignment, lanes={"gpu0": j})).throughput for j in curve}
    top = max(rates.values())
    assert rates[k] >= 0.99 * top
    assert all(rates[j] < 0.99 * top for j in curve if j < k)
    assert metrics.throughput == pytest.approx(rates[k])


def test_rounds_of_several_frames_keep_a_gpu_at_one_lane(factory):
    """Rounds of k frames are analysed on the graph unfolded k times, which holds actors of one
    frame at a time: a GPU without a lane count stays at one there, in the analysis and when
    lanes are fitted (a GPU -> CPU -> GPU mapping with rounds of two frames once failed deep in
    the unfolding)."""
    from dataclasses import replace

    p = factory.problem(6, factory.elements(2, 1), seed=1, call_overhead=0.0)
    p.lane_slowdown["gpu0"] = dict(CURVE)
    layers = [l.name for l in p.graph.layers]
    m = Mapping({l: "cpu0" if i % 3 == 2 else "gpu0" for i, l in enumerate(layers)})
    from hetflow.mapping.problem import build_app

    phases = build_app(p, m).phases
    assert len(phases["gpu0"]) > 1  # frames leave the GPU and come back
    rounds = replace(m, interleave={a: [0] * len(ps) for a, ps in phases.items() if len(ps) > 1},
                     round_frames=2)
    one = evaluate(p, replace(rounds, lanes={"gpu0": 1}))
    assert evaluate(p, rounds).throughput == pytest.approx(one.throughput)
    fitted, _ = fit_lanes(p, rounds)
    assert fitted.lanes == {"gpu0": 1}


def test_fit_lanes_with_a_latency_cap_keeps_within_it(factory):
    p = gpu_problem(factory)
    m = whole(p, "gpu0")
    lat = {k: evaluate(p, Mapping(m.assignment, lanes={"gpu0": k})).latency for k in CURVE}
    cap = (lat[2] + lat[4]) / 2
    fitted, metrics = fit_lanes(p, m, latency_cap=cap)
    assert fitted.lanes["gpu0"] == 2 and metrics.latency <= cap


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 500), a=st.floats(1.0, 2.0), b=st.floats(1.0, 2.0),
       c=st.floats(1.0, 2.5), share=st.floats(0.1, 1.3), capped=st.booleans())
def test_fit_lanes_with_a_rate_floor_takes_the_fewest_lanes_above_it(factory, seed, a, b, c,
                                                                     share, capped):
    """Oracle: every count evaluated on its own. The fewest lanes predicted at least at the
    floor (within the cap), where some count is; else what fitting without a floor gives."""
    curve = {1: 1.0, 2: a, 4: a * b, 8: a * b * c}
    p = factory.problem(5, factory.elements(1, 1), seed=seed)
    p.lane_slowdown["gpu0"] = curve
    m = whole(p, "gpu0")
    scored = {k: evaluate(p, Mapping(m.assignment, lanes={"gpu0": k})) for k in curve}
    floor = share * max(r.throughput for r in scored.values())
    cap = sorted(r.latency for r in scored.values())[2] if capped else None
    fitted, metrics = fit_lanes(p, m, cap, rate_floor=floor)
    k = fitted.lanes["gpu0"]
    enough = [j for j, r in scored.items() if r.throughput >= floor
              and (cap is None or r.latency <= cap)]
    if enough:
        assert k == min(enough)
    else:
        assert fitted.lanes == fit_lanes(p, m, cap)[0].lanes
    assert metrics.throughput == pytest.approx(scored[k].throughput)


def test_every_searched_plan_states_its_lanes(factory):
    p = gpu_problem(factory)
    for strategy in ("single", "pipeline", "greedy"):
        plan, _ = search_plan(p, strategy, "test")
        for e in plan.mapping.elements:
            if e == "gpu0":
                assert plan.mapping.lanes.get("gpu0") in CURVE
        assert plan.predicted["throughput"] == pytest.approx(
            evaluate(p, plan.mapping).throughput)


def test_lanes_on_a_cpu_element_or_past_memory_are_refused_naming_the_element(factory):
    p = gpu_problem(factory)
    m = whole(p, "cpu0")
    m.lanes = {"cpu0": 2}
    with pytest.raises(InputError, match="'cpu0' is a cpu element: only GPU elements run lanes"):
        check_lanes(p, m)
    p.lane_limit["gpu0"] = 4
    m = whole(p, "gpu0")
    m.lanes = {"gpu0": 8}
    with pytest.raises(InputError, match=r"'gpu0': 8 lanes do not fit its device memory \(at most 4"):
        check_lanes(p, m)
    assert p.best_lanes("gpu0") <= 4


def test_lanes_survive_the_plan_file_and_change_the_mapping_key():
    m = Mapping({"a": "gpu0"}, lanes={"gpu0": 4})
    back = Mapping.from_dict(m.to_dict())
    assert back.lanes == {"gpu0": 4} and back.key() == m.key()
    assert Mapping({"a": "gpu0"}).key() == Mapping({"a": "gpu0"}, lanes={"gpu0": 1}).key()
    assert Mapping({"a": "gpu0"}).key() != m.key()


def test_lanes_share_the_driving_core_so_host_time_bounds_the_rate(factory):
    p = gpu_problem(factory)
    layers = [l.name for l in p.graph.layers]
    t1 = p.actor_time(layers, "gpu0")
    p.host_time["gpu0"] = {1: t1 / 2}  # each firing keeps the one driving core busy half its time
    rates = {k: evaluate(p, Mapping({l: "gpu0" for l in layers}, lanes={"gpu0": k})).throughput
             for k in CURVE}
    assert rates[1] == pytest.approx(1 / t1)  # one lane: the device time bounds it
    assert rates[8] == pytest.approx(2 / t1)  # eight: the driving core, 1 / (t1 / 2)
    assert max(rates.values()) <= 2 / t1 * (1 + 1e-9)


def test_the_host_bound_is_the_one_measured_at_the_plans_lane_count(factory):
    # the driving thread measured 0.1 t1 a firing among 8 lanes and 0.5 t1 among 16: an
    # 8-lane plan is bounded by the first (8 / (8 * 0.1 t1) is no bound below its device rate),
    # a 16-lane plan by the second (1 / 0.5 t1), a 12-lane plan between them
    p = gpu_problem(factory)
    layers = [l.name for l in p.graph.layers]
    t1 = p.actor_time(layers, "gpu0")
    p.host_time["gpu0"] = {8: 0.1 * t1, 16: 0.5 * t1}
    p = dataclasses.replace(p, call_overhead=0.0)

    def rate(k):
        return evaluate(p, Mapping({l: "gpu0" for l in layers}, lanes={"gpu0": k})).throughput

    device = {k: k / (t1 * p.slowdown("gpu0", k, False)) for k in (8, 12, 16)}
    assert rate(8) == pytest.approx(min(device[8], 1 / (0.1 * t1)))
    assert rate(16) == pytest.approx(min(device[16], 1 / (0.5 * t1)))
    assert rate(12) == pytest.approx(min(device[12], 1 / (0.3 * t1)))
    assert p.host_seconds("gpu0", 0, False, 4) == pytest.approx(0.1 * t1)  # below: nearest
    assert p.host_seconds("gpu0", 0, False, 24) == pytest.approx(0.5 * t1)  # above: nearest


def test_a_stage_fed_a_large_input_pays_its_staging_copy_on_the_driving_core(factory):
    from hetflow.mapping.problem import build_app

    p = gpu_problem(factory)
    layers = [l.name for l in p.graph.layers]
    m = Mapping({l: ("cpu0" if l in layers[:2] else "gpu0") for l in layers}, lanes={"gpu0": 8})
    (phase,) = build_app(p, m).phases["gpu0"]
    nbytes = sum(p.graph.tensors[t].nbytes for t in phase.inputs)
    host = 4 * max(p.actor_time(layers[:2], "cpu0"), p.actor_time(phase.layers, "gpu0"))
    p.host_time["gpu0"] = {1: 0.0}
    p.host_per_byte["gpu0"] = host / nbytes  # staging its input outlasts any stage's firing
    staged = evaluate(p, m).throughput
    # 8 lanes share one driving core that spends `host` per firing: at most 1 / host
    assert staged <= 1 / host * (1 + 1e-9)
    p.host_per_byte["gpu0"] = 0.0
    assert evaluate(p, m).throughput > staged * 2  # the bound came from the copy


def test_one_lane_adds_the_hosts_work_to_each_phase_but_not_to_the_whole_model(factory):
    """Frame by frame, CPU -> GPU -> CPU with one lane: the one-lane isolated latency grows by
    the host's fixed time plus its per-byte copies of the GPU phase's borders (hand-worked);
    the whole model on the GPU, timed with its host work in it, does not change."""
    from hetflow.mapping.problem import build_app

    p = gpu_problem(factory)
    layers = [l.name for l in p.graph.layers]
    m = Mapping({l: ("gpu0" if 1 <= i < len(layers) - 1 else "cpu0")
                 for i, l in enumerate(layers)}, lanes={"gpu0": 1})
    (phase,) = build_app(p, m).phases["gpu0"]
    border = sum(p.graph.tensors[t].nbytes for t in (*phase.inputs, *phase.outputs))
    before, alone = evaluate(p, m), evaluate(p, whole(p, "gpu0")).throughput
    p.host_time["gpu0"], p.host_per_byte["gpu0"] = {1: 3e-4}, 1e-10
    after = evaluate(p, m)
    assert after.latency_isolated == pytest.approx(before.latency_isolated + 3e-4
                                                   + 1e-10 * border, rel=1e-9)
    assert evaluate(p, whole(p, "gpu0")).throughput == pytest.approx(alone)


def test_a_plan_with_lanes_survives_its_file(factory, tmp_path):
    from hetflow.plan.plan import Plan

    p = gpu_problem(factory)
    plan, _ = search_plan(p, "single", "test")
    path = plan.save(tmp_path / "p.json")
    back = Plan.load(path)
    assert plan.mapping.lanes.get("gpu0", 1) > 1  # the data-parallel plan uses the GPU's lanes
    assert back.mapping.lanes == plan.mapping.lanes
    assert back.predicted["lanes"] == plan.predicted["lanes"]


def test_a_stage_with_its_own_curve_is_slowed_by_it_and_by_the_loads_share(factory):
    """A GPU stage timed at its lane counts uses its own curve, not the whole model's; beside
    busy elements it takes the whole model's busy / alone ratio at k on top."""
    from hetflow.model.subnet import subnet_key

    busy = {1: 1.5, 2: 2.0, 4: 3.0, 8: 6.0}
    p = gpu_problem(factory, alone=CURVE, busy=busy)
    layers = [l.name for l in p.graph.layers]
    head, tail = layers[:4], layers[4:]
    key = subnet_key(head)
    assert p.stage_key(head) is None  # no stage curves: no key to sort
    p.stage_slowdown[("gpu0", key)] = {1: 1.0, 4: 3.2}
    assert p.stage_key(head) == key
    assert p.slowdown("gpu0", 4, busy=False, stage=key) == 3.2
    assert p.slowdown("gpu0", 4, busy=True, stage=key) == pytest.approx(3.2 * 3.0 / 1.8)
    # a count the stage was not timed at, or another stage: the whole model's curve
    assert p.slowdown("gpu0", 2, busy=False, stage=key) == CURVE[2]
    assert p.slowdown("gpu0", 4, busy=False, stage="other") == CURVE[4]
    # the pipeline gpu0 (head, 4 lanes) -> cpu0 (tail), the stage so slow at 4 lanes that the
    # GPU binds: 4 frames per slowed firing
    p.stage_slowdown[("gpu0", key)] = {1: 1.0, 4: 400.0}
    m = Mapping({**{l: "gpu0" for l in head}, **{l: "cpu0" for l in tail}}, lanes={"gpu0": 4})
    t_gpu = p.actor_time(head, "gpu0") * 400.0 * 3.0 / 1.8
    got = evaluate(p, m)
    assert got.throughput == pytest.approx(4 / t_gpu, rel=1e-6)
    assert got.utilisation["gpu0"] == pytest.approx(1.0)
