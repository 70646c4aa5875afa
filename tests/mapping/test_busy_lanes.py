"""A run with busy copies beside the GPU recalibrates its busy lane curve (the bench's parallel
baseline, or the profile's busy run for `hetflow map`)."""

import pytest

from hetflow.mapping.calibration import busy_lane_scales
from hetflow.plan.mapping import Mapping, group_name
from hetflow.mapping.problem import evaluate
from tests.mapping.conftest import make_elements, make_problem

CURVE = {1: 1.0, 2: 1.2, 4: 1.6, 8: 2.4}


def laned_problem():
    p = make_problem(6, make_elements(2, 1), call_overhead=0.0)
    p.lane_slowdown["gpu0"] = dict(CURVE)
    p.lane_slowdown_busy["gpu0"] = {k: 1.1 * v for k, v in CURVE.items()}
    return p


def test_the_scale_makes_the_curve_say_what_the_baseline_measured():
    p = laned_problem()
    layers = [l.name for l in p.graph.layers]
    t1 = p.actor_time(layers, "gpu0")
    curve_rate = 8 / (t1 * 1.1 * 2.4)
    rates = {"gpu0": 0.8 * curve_rate, "cpu0": 50.0, "cpu1": 50.0}
    scale = busy_lane_scales(p, rates, {"gpu0": 8})
    assert set(scale) == {"gpu0"} and scale["gpu0"] == pytest.approx(1 / 0.8)
    # the GPU beside the copies now fires at the measured rate; alone it keeps its own curve
    g = group_name(["cpu0", "gpu0"])
    beside = Mapping({l: g for l in layers}, lanes={"gpu0": 8})
    alone = Mapping({l: "gpu0" for l in layers}, lanes={"gpu0": 8})
    before = (evaluate(p, beside).throughput, evaluate(p, alone).throughput)
    p.lane_busy_scale.update(scale)
    cpu_rate = 1 / p.actor_time(layers, "cpu0")
    assert evaluate(p, beside).throughput == pytest.approx(cpu_rate + 0.8 * curve_rate, rel=1e-6)
    assert evaluate(p, beside).throughput < before[0]
    assert evaluate(p, alone).throughput == pytest.approx(before[1])
    # asking again with the scale in place gives the same scale, not its square
    assert busy_lane_scales(p, rates, {"gpu0": 8})["gpu0"] == pytest.approx(scale["gpu0"])


def test_the_busy_lane_count_is_the_busy_curves_best_within_memory():
    from hetflow.profile.lanes import best_busy_lanes, best_count

    def table(busy, limit=None):
        t = {str(k): {"alone": {"median": 1e-3 * k}, "busy": {"median": 1e-3 * v}}
             for k, v in busy.items()}
        return {**t, **({"memory": {"max_lanes": limit}} if limit else {})}

    curve = {1: 1.0, 2: 1.2, 4: 1.6, 8: 2.4}  # rates 1, 1.67, 2.5, 3.33: eight lanes
    assert best_busy_lanes(table(curve)) == 8
    assert best_busy_lanes(table(curve, limit=4)) == 4  # what the device's memory holds
    assert best_count({1: 1.0, 2: 1.995, 4: 2.0}) == 2  # the fewest within 1% of the best


def test_map_rescales_the_busy_curve_by_the_profiles_busy_run(factory, tmp_path):
    """The profile's busy run read the GPU at half the rate its busy curve promises at 8 lanes:
    `calibrated_problem` (its step "contention") scales the curve as the bench does with its
    baseline; the profile's own problem leaves it alone."""
    from hetflow.mapping.from_profile import calibrated_problem, problem_from_profile
    from hetflow.platform import CpuCluster, Platform
    from hetflow.platform.spec import Gpu
    from hetflow.profile.profile import Profile

    graph = factory.problem(4, factory.elements(1, 1)).graph
    plat = Platform("t", (CpuCluster("c", (0, 1)),), (Gpu(0, "gpu", 1),))
    prof = Profile(graph.name, graph.model_hash, plat.name, plat.platform_hash)
    for e, kind in (("cpu0", "cpu"), ("gpu0", "gpu")):
        prof.layer_times[e] = {l.name: {"median": 1e-3} for l in graph.layers}
        prof.elements[e] = {"kind": kind}
    prof.whole_model["cpu0"] = {"median": 4e-3}
    prof.gpu_lanes["gpu0"] = {str(k): {"alone": {"median": 1e-3 * v},
                                       "busy": {"median": 1.1e-3 * v}} for k, v in CURVE.items()}
    whole = [l.name for l in graph.layers]
    plain = problem_from_profile(graph, prof, plat)
    promised = 8 / (plain.actor_time(whole, "gpu0") * plain.slowdown("gpu0", 8, busy=True))
    prof.calibration.update(busy_fps={"cpu0": 250.0, "gpu0": 0.5 * promised},
                            busy_lanes={"gpu0": 8})
    prof = Profile.load(prof.save(tmp_path / "p.json"))
    assert problem_from_profile(graph, prof, plat).lane_busy_scale == {}
    busy, steps = calibrated_problem(graph, prof, plat)
    assert [s["step"] for s in steps] == ["profile", "contention"]
    assert busy.lane_busy_scale["gpu0"] == pytest.approx(2.0)
    assert busy.contention["gpu0"] == 1.0  # its curve carries its slowdown, not a factor


def test_a_longer_run_of_the_gpu_alone_replaces_its_lane_curves_point():
    """The bench's peak-single baseline ran the GPU alone at 8 lanes at 0.6x what the lane
    table promised: the GPU alone is predicted at the measured rate there, the best lane count
    moves to 4, and neither the busy curve nor the other counts change."""
    from hetflow.mapping.calibration import alone_lane_slowdown

    p = laned_problem()
    layers = [l.name for l in p.graph.layers]
    t1 = p.actor_time(layers, "gpu0")
    rate = {k: k / (t1 * v) for k, v in CURVE.items()}  # 1, 1.67, 2.5, 3.33 (/ t1)
    alone = {k: Mapping({l: "gpu0" for l in layers}, lanes={"gpu0": k}) for k in CURVE}
    assert p.best_lanes("gpu0", busy=False) == 8
    busy_before = p.slowdown("gpu0", 8, busy=True)
    p.lane_alone_runs["gpu0"] = {8: alone_lane_slowdown(p, "gpu0", 8, 0.6 * rate[8])}
    assert evaluate(p, alone[8]).throughput == pytest.approx(0.6 * rate[8], rel=1e-6)
    assert evaluate(p, alone[4]).throughput == pytest.approx(rate[4], rel=1e-6)
    assert p.best_lanes("gpu0", busy=False) == 4  # 0.6 x 3.33 = 2.0 < 2.5
    assert p.slowdown("gpu0", 8, busy=True) == pytest.approx(busy_before)
    assert p.lane_slowdown["gpu0"] == CURVE  # the table itself is kept


def test_the_lanes_alone_step_puts_a_baselines_rate_into_a_new_problem():
    """Step "lanes alone" (the bench's peak-single baseline, as saved in a calibration) gives
    a new problem with the measured point; the problem given is left as it was. One lane, an
    element without a lane curve and an empty run change nothing."""
    from hetflow.mapping.calibration import with_lanes_alone

    p = laned_problem()
    layers = [l.name for l in p.graph.layers]
    t1 = p.actor_time(layers, "gpu0")
    q, summary = with_lanes_alone(p, {"gpu0": {"8": 2.0 / t1}, "cpu0": {"8": 250.0}})
    assert q.lane_alone_runs == {"gpu0": {8: pytest.approx(8 / 2.0)}}
    assert p.lane_alone_runs == {} and q is not p
    assert summary == {"frames_per_s": {"gpu0": {8: pytest.approx(2.0 / t1, rel=1e-3)}}}
    r, _ = with_lanes_alone(p, {"gpu0": {1: 9.0, 4: 0.0}})
    assert r.lane_alone_runs == {}


def test_copies_measured_batched_rescale_the_curve_at_their_batch():
    """The bench's copies ran the GPU at 4 lanes of 8 frames a firing: the rate the batch table
    promises there gives a scale of 1 (read as lanes of one frame it would say the GPU is
    several times faster than its curve), and a slower measured rate scales it by as much."""
    from hetflow.mapping.from_profile import with_batches
    from tests.mapping.test_batch_cost_model import batch_table

    p = laned_problem()
    layers = [l.name for l in p.graph.layers]
    t1 = p.actor_time(layers, "gpu0")
    p = with_batches(p, {"gpu0": batch_table(t1, CURVE, 0.7, busy=1.1)})
    promised = 4 * 8 / (t1 * p.slowdown("gpu0", 4, busy=True)
                        * p.batch_factor("gpu0", 8, 4, busy=True))
    rates = {"gpu0": promised, "cpu0": 50.0}
    assert busy_lane_scales(p, rates, {"gpu0": 4}, {"gpu0": 8})["gpu0"] == pytest.approx(1.0)
    assert busy_lane_scales(p, rates, {"gpu0": 4})["gpu0"] < 0.4  # the batch left out
    slower = {"gpu0": 0.8 * promised}
    assert busy_lane_scales(p, slower, {"gpu0": 4}, {"gpu0": 8})["gpu0"] == \
        pytest.approx(1 / 0.8)
