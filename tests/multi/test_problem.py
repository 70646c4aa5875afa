from dataclasses import replace
from types import SimpleNamespace

import pytest

from hetflow.errors import InputError
from hetflow.multi.problem import MultiProblem, calibrate_to_whole, find_profile, schedule_of
from hetflow.multi.spec import AppSpec
from hetflow.plan.mapping import Mapping
from hetflow.profile.profile import Profile

from multi_helpers import app_problem, elements


def test_calibrate_to_whole_scales_each_element_to_its_measured_model_time():
    a = app_problem(6, 1, 0.05, 1)
    p = a.problem
    p = replace(p, element_overhead={"cpu0": 1e-4})
    sums = p.layer_times.sum(axis=0).copy()
    prof = SimpleNamespace(whole_model={"cpu0": {"median": 2 * sums[0] + 1e-4}}, subnet_times={})
    scaled, factors = calibrate_to_whole(p, prof)
    assert factors == {"cpu0": pytest.approx(2.0)}
    layers = [l.name for l in a.graph.layers]
    # the whole model on cpu0 now costs what was measured (the call included once)
    assert scaled.actor_time(layers, "cpu0") == pytest.approx(2 * sums[0] + 1e-4)
    assert scaled.layer_times[:, 2].sum() == pytest.approx(sums[2])  # gpu0: nothing measured
    assert (p.layer_times.sum(axis=0) == sums).all()  # the problem given is left as it was


@pytest.mark.parametrize("stat, expect", [("median", 2.0), ("p90", 3.0), ("max", 4.0)])
def test_calibrate_to_a_chosen_statistic_of_the_whole_model(stat, expect):
    a = app_problem(6, 1, 0.05, 1)
    p = a.problem
    sums = p.layer_times.sum(axis=0).copy()
    whole = {"median": 2 * sums[0], "p90": 3 * sums[0], "max": 4 * sums[0]}
    prof = SimpleNamespace(whole_model={"cpu0": whole}, subnet_times={})
    assert calibrate_to_whole(p, prof, stat)[1] == {"cpu0": pytest.approx(expect)}


@pytest.mark.parametrize("stat, expect", [("median", 2.0), ("p90", 3.0), ("max", 4.0)])
def test_a_whole_model_measured_as_one_piece_costs_the_chosen_statistic(stat, expect):
    """A whole-model mapping costs the whole model's measured time as one piece (the problem's
    subnet time, its median): at p90 or max it is that statistic, never the median."""
    from hetflow.model.subnet import subnet_key

    a = app_problem(6, 1, 0.05, 1)
    layers = [l.name for l in a.graph.layers]
    sums = a.problem.layer_times.sum(axis=0).copy()
    p = replace(a.problem, subnet_times={("cpu0", subnet_key(layers)): 2 * sums[0]})
    whole = {"median": 2 * sums[0], "p90": 3 * sums[0], "max": 4 * sums[0]}
    prof = SimpleNamespace(whole_model={"cpu0": whole}, subnet_times={})
    scaled, _ = calibrate_to_whole(p, prof, stat)
    assert scaled.actor_time(layers, "cpu0") == pytest.approx(expect * sums[0])


def test_a_bound_at_the_largest_firing_takes_the_largest_measured_at_each_lane_count():
    a = app_problem(6, 1, 0.05, 1)
    p = replace(a.problem, lane_slowdown={"gpu0": {1: 1.0, 2: 1.5, 4: 2.0, 8: 3.0}})

    def row(med, mx):
        return {"alone": {"median": med, "p90": med, "max": mx}}

    # mean firings 1, 1.5, 2, 3 ms; the largest at 4 lanes 3 ms, at 8 lanes no more than the mean
    prof = SimpleNamespace(whole_model={"gpu0": {"median": 1e-3, "max": 1e-3}}, subnet_times={},
                           gpu_lanes={"gpu0": {"1": row(1e-3, 1.4e-3), "2": row(1.5e-3, 1.5e-3),
                                               "4": row(2e-3, 3e-3), "8": row(3e-3, 2.5e-3)}})
    assert calibrate_to_whole(p, prof, "max")[0].lane_slowdown["gpu0"] == pytest.approx(
        {1: 1.0, 2: 1.5, 4: 3.0, 8: 3.0})  # (one lane: the whole model's own statistic)
    assert calibrate_to_whole(p, prof, "median")[0].lane_slowdown == p.lane_slowdown
    assert p.lane_slowdown["gpu0"][4] == 2.0  # the problem given is left as it was


def test_profiles_without_a_max_fall_back_to_p90_and_unknown_statistics_are_refused():
    a = app_problem(6, 1, 0.05, 1)
    sums = a.problem.layer_times.sum(axis=0).copy()
    prof = SimpleNamespace(whole_model={"cpu0": {"median": sums[0], "p90": 3 * sums[0]}},
                           subnet_times={})
    assert calibrate_to_whole(a.problem, prof, "max")[1] == {"cpu0": pytest.approx(3.0)}
    with pytest.raises(InputError, match="time statistic 'p99'.*median, p90, max"):
        calibrate_to_whole(a.problem, prof, "p99")


def test_a_schedule_has_a_task_per_phase_with_transfers():
    a = app_problem(6, 1, 0.05, 1)
    layers = [l.name for l in a.graph.layers]
    half = {l: "cpu0" if i < 3 else "gpu0" for i, l in enumerate(layers)}
    s = schedule_of(a, Mapping(half))
    assert {t.element for t in s.tasks} == {"cpu0", "gpu0"}
    total = sum(t.time for t in s.tasks)
    want = (a.problem.actor_time(layers[:3], "cpu0") + a.problem.actor_time(layers[3:], "gpu0")
            + len(s.tasks) * a.problem.call_overhead)
    assert total == pytest.approx(want)
    assert s.response_isolated >= total  # one frame's tasks run in sequence here
    assert any(d > 0 for _, _, d in s.edges)  # a cpu0 -> gpu0 channel costs its transfer


def test_configurations_are_those_every_profile_covers():
    els = elements()
    a = app_problem(5, 1, 0.05, 1, els)
    b = app_problem(5, 2, 0.05, 2, els[:2])  # this one's profile has no GPU
    assert MultiProblem([a, b]).configurations() == [["cpu0", "cpu1"]]


def save_profile(path, model, platform_hash):
    Profile(model, "h", "plat", platform_hash).save(path)


def test_find_profile(tmp_path):
    plat = SimpleNamespace(name="box", platform_hash="P1")
    spec = AppSpec("models/net.onnx", 0.02, 1, "net")
    with pytest.raises(InputError, match=r"no net\.\*\.profile\.json in .*hetflow profile"):
        find_profile(spec, tmp_path, plat)
    save_profile(tmp_path / "net.box.profile.json", "net", "P1")
    assert find_profile(spec, tmp_path, plat).name == "net.box.profile.json"
    save_profile(tmp_path / "net.other.profile.json", "net", "P2")
    assert find_profile(spec, tmp_path, plat).name == "net.box.profile.json"  # by platform
    save_profile(tmp_path / "net.box2.profile.json", "net", "P1")
    with pytest.raises(InputError, match="2 profiles .* match platform box"):
        find_profile(spec, tmp_path, plat)
    own = AppSpec("net.onnx", 0.02, 1, "net", str(tmp_path / "net.other.profile.json"))
    assert find_profile(own, None, plat).name == "net.other.profile.json"
    with pytest.raises(InputError, match="no profile; give --profile-dir"):
        find_profile(AppSpec("net.onnx", 0.02, 1, "net"), None, plat)


def test_a_bound_from_few_profiling_runs_is_said_to_be_thin():
    from hetflow.multi.problem import FEW_RUNS, thin_bounds

    def app(name, runs):
        return SimpleNamespace(name=name, runs=runs,
                               problem=SimpleNamespace(lane_slowdown={"gpu0": {1: 1.0}}))

    apps = [app("a", {"cpu0-7": 5, "gpu0": 5}), app("b", {"cpu8-14": FEW_RUNS})]
    used = {"a": ["cpu0-7", "gpu0"], "b": ["cpu8-14"]}
    notes = thin_bounds(SimpleNamespace(time_stat="max", apps=apps), used)
    # a's cores, timed 5 times; not its GPU (lane curves of thousands of firings), nor b's
    assert len(notes) == 1 and "application a" in notes[0] and "cpu0-7" in notes[0]
    assert "max of 5 profiling runs" in notes[0]
    assert thin_bounds(SimpleNamespace(time_stat="median", apps=apps), used) == []
