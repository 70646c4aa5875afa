"""`map-multi --verify`: the admission analysed again with each task's longest firing in a trial
run of the plan; admitted only if that meets every deadline and the trial missed none."""
import os
from types import SimpleNamespace

import numpy as np
import onnx
import pytest

from hetflow.mapping.problem import Problem
from hetflow.model import load_model
from hetflow.model.synthetic import random_cnn_model
from hetflow.multi import verify as verify_mod
from hetflow.multi.multiplan import make_multiplan
from hetflow.multi.problem import AppProblem, MultiProblem
from hetflow.multi.search import search_multi
from hetflow.multi.spec import AppSpec
from hetflow.platform.spec import ProcessingElement

from multi_helpers import transfer


def local_problem(tmp_path, deadlines=(None, None)) -> MultiProblem:
    """Two tiny models on this machine's first core, each layer timed 0.1 ms (synthetic)."""
    core = sorted(os.sched_getaffinity(0))[0]
    els = [ProcessingElement(f"cpu{core}", "cpu", (core,), cluster="cpu")]
    apps = []
    for (name, seed, period), deadline in zip((("x", 31, 0.05), ("y", 32, 0.06)), deadlines):
        path = tmp_path / f"{name}.onnx"
        onnx.save(random_cnn_model(5, seed=seed), path)
        g = load_model(path)
        p = Problem(g, els, np.full((len(g.layers), 1), 1e-4), transfer)
        apps.append(AppProblem(AppSpec(str(path), period, len(apps) + 1, name,
                                       deadline=deadline), g, p))
    return MultiProblem(apps)


def planned(tmp_path):
    """(problem, search result, its multi-plan, {application: its task names})."""
    mp = local_problem(tmp_path)
    result = search_multi(mp, pop_size=4, generations=1)
    tasks = {s.name: [t.name for t in s.tasks] for s in result.chosen.schedules}
    return mp, result, make_multiplan(mp, result), tasks


def fake_run(tasks: dict[str, list[str]], longest: dict[str, float], missed: dict[str, int],
             worst: dict | None = None):
    """A stand-in for `run_multiplan`: every task (`tasks`, per application) of an application
    fired at most `longest`; its worst response `worst` (default: its longest firing)."""
    worst = worst or longest

    def run(mplan, **kwargs):
        apps = [SimpleNamespace(name=a.name, frames=20, latency={"max": worst.get(a.name)},
                                notes={"missed": missed.get(a.name, 0), "task_s": {
                                    t: {"max": longest[a.name]} for t in tasks[a.name]}})
                for a in mplan.apps]
        return SimpleNamespace(apps=apps, wall_s=1.0)
    return run


@pytest.mark.parametrize("longest, missed, admitted", [
    ({"x": 1e-5, "y": 1e-5}, {}, True),     # faster than the profile: nothing changes
    ({"x": 0.004, "y": 0.003}, {}, True),    # slower, still far inside 50 and 60 ms
    ({"x": 0.004, "y": 0.07}, {}, False),    # y's firing alone outlasts its 60 ms deadline
    ({"x": 1e-5, "y": 1e-5}, {"y": 1}, False),  # the trial itself missed a deadline
])
def test_the_trial_s_longest_firings_decide(tmp_path, monkeypatch, longest, missed, admitted):
    mp, result, mplan, tasks = planned(tmp_path)
    monkeypatch.setattr(verify_mod, "run_multiplan", fake_run(tasks, longest, missed))
    again, record = verify_mod.verify(mp, result, mplan, 1.0)
    assert record["admitted"] is admitted
    for s in again.chosen.schedules:
        before = next(b for b in result.chosen.schedules if b.name == s.name)
        # each task's time: its own, or the trial's longest firing where that is longer
        assert [t.time for t in s.tasks] == [max(t.time, longest[s.name]) for t in before.tasks]
        assert record["bound_s"][s.name] >= record["bound_profile_s"][s.name]
        # a frame's response is at least its own firings' time
        assert record["bound_s"][s.name] >= sum(t.time for t in s.tasks) - 1e-12


def test_a_trial_run_on_this_machine_measures_every_task_of_the_plan(tmp_path):
    mp = local_problem(tmp_path)
    result = search_multi(mp, pop_size=4, generations=1)
    mplan = make_multiplan(mp, result)
    again, record = verify_mod.verify(mp, result, mplan, 0.5)
    assert all(n >= 20 for n in record["frames"].values())
    for s in result.chosen.schedules:  # the run's tasks are the analysis's, by name
        measured = record["longest_firing_s"][s.name]
        assert sorted(measured) == sorted(t.name for t in s.tasks)
        assert all(x > 0 for x in measured.values())
    assert record["admitted"] == (again.chosen.feasible and not any(record["missed"].values()))


def test_map_multi_verify_on_this_machine(tmp_path):
    import json

    from typer.testing import CliRunner

    from hetflow.cli.main import app
    from hetflow.errors import InputError

    runner = CliRunner()
    core = sorted(os.sched_getaffinity(0))[0]
    plat = tmp_path / "one.yaml"
    plat.write_text(f"name: one\nclusters: [{{name: cpu, cores: [{core}], peak_gflops_per_core: 20, "
                    "mem_gbps: 10}]\n")
    onnx.save(random_cnn_model(6, seed=5), tmp_path / "a.onnx")
    r = runner.invoke(app, ["profile", str(tmp_path / "a.onnx"), "-p", str(plat), "--estimate",
                            "-o", str(tmp_path / "prof" / "a.one.profile.json")])
    assert r.exit_code == 0, r.output
    args = ["map-multi", f"{tmp_path}/a.onnx:period=50ms:streams=2", "--profile-dir",
            str(tmp_path / "prof"), "-p", str(plat), "--pop-size", "4", "--generations", "1"]
    out = tmp_path / "m.json"
    r = runner.invoke(app, [*args, "--verify", "0.5", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "every deadline is met (predicted, with the longest firings of a" in r.output
    plan = json.loads(out.read_text())
    trial = plan["search"]["verified"]
    assert trial["admitted"] is True and plan["predicted"]["schedulable"] is True
    assert plan["apps"][0]["predicted"]["response_worst"] == pytest.approx(trial["bound_s"]["a"])
    bad = runner.invoke(app, [*args, "--verify", "0.5", "--naive"])
    assert isinstance(bad.exception, InputError) and "--verify checks an admission" in \
        str(bad.exception)


def test_a_trial_cut_short_by_a_signal_admits_nothing(tmp_path, monkeypatch):
    from hetflow import interrupt

    mp, result, mplan, tasks = planned(tmp_path)
    run = fake_run(tasks, {"x": 1e-5, "y": 1e-5}, {})

    def signalled(mplan, **kwargs):  # the run returns what it measured after a signal
        interrupt.STOP.set()
        return run(mplan, **kwargs)

    monkeypatch.setattr(verify_mod, "run_multiplan", signalled)
    with interrupt.handled():
        with pytest.raises(interrupt.Interrupted):
            verify_mod.verify(mp, result, mplan, 1.0)


def test_a_set_the_trial_refuses_is_refused_as_the_search_refuses_one(tmp_path, monkeypatch):
    from hetflow.errors import InfeasibleError

    mp, result, _, tasks = planned(tmp_path)
    monkeypatch.setattr(verify_mod, "run_multiplan", fake_run(tasks, {"x": 0.004, "y": 0.07}, {}))
    # y's 70 ms firing outlasts its own 60 ms deadline, and blocks x on their one core
    with pytest.raises(InfeasibleError, match=r"refused by a 1 s trial run of the plan: x: .*"
                                              r"; y: bound \d+\.\d ms with the trial's "
                                              r"firings, deadline 60\.0 ms \(its longest"
                                              r"-grown firing: y's .* on cpu\d+, 70\.0 ms in "
                                              r"the trial, 0\.\d+ ms in the analysis\)"):
        verify_mod.verified(mp, result, 1.0, "multi-nsga2")
    monkeypatch.setattr(verify_mod, "run_multiplan", fake_run(tasks, {"x": 0.001, "y": 0.001}, {}))
    again = verify_mod.verified(mp, result, 1.0, "multi-nsga2")
    assert again.notes["verified"]["admitted"] is True
    assert make_multiplan(mp, again).search["verified"]["admitted"] is True


def test_a_trial_response_past_its_bound_is_noted_in_the_plan(tmp_path, monkeypatch):
    mp, result, _, tasks = planned(tmp_path)
    monkeypatch.setattr(verify_mod, "run_multiplan", fake_run(
        tasks, {"x": 0.001, "y": 0.001}, {}, worst={"x": 0.001, "y": 0.045}))
    again = verify_mod.verified(mp, result, 1.0, "multi-nsga2")
    bound = again.notes["verified"]["bound_s"]["y"]
    assert bound < 0.045  # the stand-in's worst response passed it, inside the 60 ms deadline
    notes = make_multiplan(mp, again).search["notes"]
    assert any(n.startswith("the trial's worst response passed its bound") and
               "y: 45.0 ms in the trial" in n and "x:" not in n for n in notes)


def test_the_refusal_names_the_firing_that_grew_most_and_none_where_none_grew(tmp_path):
    mp, result, _, tasks = planned(tmp_path)
    times = {t.name: t.time for s in result.chosen.schedules for t in s.tasks}
    assert verify_mod.grown_most(result, {}) == ""
    faster = {a: {t: 0.5 * times[t] for t in ts} for a, ts in tasks.items()}
    assert verify_mod.grown_most(result, faster) == ""
    grown = {a: {t: 2 * times[t] for t in ts} for a, ts in tasks.items()}
    grown["x"][tasks["x"][-1]] = 9 * times[tasks["x"][-1]]
    assert f"x's {tasks['x'][-1]} on" in verify_mod.grown_most(result, grown)
