"""`hetflow map-multi` with profiles found in --profile-dir, and `hetflow run-multi`."""
import json
import os
import re

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from hetflow.cli.main import app
from hetflow.errors import InfeasibleError, InputError
from hetflow.model import load_model
from hetflow.model.synthetic import random_cnn_model
from hetflow.mapping.problem import Problem
from hetflow.multi.multiplan import MultiPlan, make_multiplan
from hetflow.multi.problem import AppProblem, MultiProblem
from hetflow.multi.search import search_multi
from hetflow.multi.spec import AppSpec
from hetflow.platform.spec import ProcessingElement

from multi_helpers import transfer

runner = CliRunner()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two tiny ONNX models and their estimated profiles on the bundled HiKey970."""
    d = tmp_path_factory.mktemp("multi")
    for name, seed in (("a", 21), ("b", 22)):
        onnx.save(random_cnn_model(7, seed=seed), d / f"{name}.onnx")
        r = runner.invoke(app, ["profile", str(d / f"{name}.onnx"), "--platform", "hikey970",
                                "--estimate", "-o", str(d / "profiles" / f"{name}.hikey970.profile.json")])
        assert r.exit_code == 0, r.output
    return d


def map_multi(d, *specs, extra=()):
    return runner.invoke(app, ["map-multi", *specs, "--profile-dir", str(d / "profiles"),
                               "--platform", "hikey970", "--pop-size", "8", "--generations",
                               "2", *extra])


def test_map_multi_writes_a_multiplan_and_front(models, tmp_path):
    out, front = tmp_path / "m.json", tmp_path / "front.csv"
    r = map_multi(models, f"{models}/a.onnx:period=20ms:priority=2",
                  f"{models}/b.onnx:period=30ms:priority=1",
                  extra=["-o", str(out), "--pareto", str(front)])
    assert r.exit_code == 0, r.output
    assert "multi-plan on hikey970" in r.output and f"wrote {out}" in r.output
    plan = MultiPlan.load(out)
    assert [(a.name, a.priority) for a in plan.apps] == [("b", 1), ("a", 2)]
    assert all(a.predicted["schedulable"] for a in plan.apps)
    assert plan.predicted["energy_j_per_s"] > 0  # the platform gives powers
    assert front.exists() and front.with_suffix(".png").exists()


def test_map_multi_naive_writes_the_baseline_plan(models, tmp_path):
    out = tmp_path / "naive.json"
    r = map_multi(models, f"{models}/a.onnx:period=20ms", f"{models}/b.onnx:period=30ms",
                  extra=["--naive", "-o", str(out)])
    assert r.exit_code == 0, r.output
    plan = MultiPlan.load(out)
    assert plan.search["algorithm"] == "naive"
    assert all(len(a.plan.mapping.actors) == 1 for a in plan.apps)


def test_map_multi_json(models):
    r = map_multi(models, f"{models}/a.onnx:period=20ms", f"{models}/b.onnx:period=30ms",
                  extra=["--json", "--algorithm", "spea2"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["kind"] == "hetflow-multiplan" and d["search"]["algorithm"] == "spea2"


@pytest.mark.parametrize("specs, error, match", [
    (["{d}/a.onnx:period=0ms", "{d}/b.onnx:period=30ms"], InputError, "must be positive"),
    (["{d}/a.onnx:period=20ms:name=cam", "{d}/b.onnx:period=30ms:name=cam"], InputError,
     "two applications are named 'cam'"),
    (["{d}/a.onnx:period=20ms:deadline=0ms"], InputError,
     "application a: deadline=0ms: a deadline must be positive"),
    (["{d}/a.onnx:period=20ms:deadline=-3ms"], InputError,
     "application a: deadline=-3ms: a deadline must be positive"),
    (["{d}/a.onnx:period=20ms:streams=0"], InputError, "application a: streams=0: give at least"),
    (["{d}/a.onnx:period=20ms:deadline=20us"], InfeasibleError,
     "application a: no mapping meets its deadline of 0.02 ms"),
    (["{d}/a.onnx:period=20ms:priority=1", "{d}/b.onnx:period=30ms:priority=1"], InputError,
     "priority clash"),
    (["{d}/a.onnx:period=20us", "{d}/b.onnx:period=30ms"], InfeasibleError,
     "application a: no mapping meets its period"),
    (["{d}/c.onnx:period=20ms"], InputError, "no c.*profile.json"),
])
def test_map_multi_bad_input(models, specs, error, match):
    r = map_multi(models, *[s.format(d=models) for s in specs])
    assert isinstance(r.exception, error), r.output
    assert re.search(match, str(r.exception))
    assert r.exception.exit_code == 2 and "\n" not in str(r.exception)


def test_map_multi_streams_of_one_model_given_by_name_and_as_streams(models, tmp_path):
    out = tmp_path / "m.json"
    r = map_multi(models, f"{models}/a.onnx:period=40ms:name=cam1",
                  f"{models}/a.onnx:period=40ms:name=cam2",
                  f"{models}/b.onnx:period=60ms:deadline=120ms:streams=3",
                  extra=["-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "every deadline is met (predicted)" in r.output
    d = json.loads(out.read_text())
    apps = {a["name"]: a for a in d["apps"]}
    assert set(apps) == {"cam1", "cam2", "b"}
    assert apps["b"]["streams"] == 3 and apps["b"]["deadline_s"] == pytest.approx(0.12)
    assert "streams" not in apps["cam1"] and "deadline_s" not in apps["cam1"]


def test_map_multi_max_streams_names_the_most_admitted_and_the_bottleneck(models, tmp_path):
    out = tmp_path / "m.json"
    r = map_multi(models, f"{models}/a.onnx:period=5ms", f"{models}/b.onnx:period=500us",
                  extra=["--max-streams", "b", "-o", str(out)])
    assert r.exit_code == 0, r.output
    m = re.search(r"most streams of b admitted: (\d+) \(\d+ searches\); at (\d+): (.*)",
                  " ".join(r.output.split()))
    assert m, r.output
    n = int(m.group(1))
    assert n >= 1 and int(m.group(2)) == n + 1 and "bottleneck element" in m.group(3)
    d = json.loads(out.read_text())
    assert d["search"]["max_streams"]["streams"] == n
    assert next(a for a in d["apps"] if a["name"] == "b").get("streams", 1) == n
    bad = map_multi(models, f"{models}/a.onnx:period=5ms", extra=["--max-streams", "zz"])
    assert isinstance(bad.exception, InputError) and "--max-streams zz" in str(bad.exception)


def test_run_multi_on_this_machine(tmp_path):
    """A multi-plan for this machine's cores (synthetic times: the check is that it runs)."""
    core = sorted(os.sched_getaffinity(0))[0]
    els = [ProcessingElement(f"cpu{core}", "cpu", (core,), cluster="cpu")]
    apps = []
    for name, seed, period in (("x", 31, 0.05), ("y", 32, 0.06)):
        path = tmp_path / f"{name}.onnx"
        onnx.save(random_cnn_model(5, seed=seed), path)
        g = load_model(path)
        p = Problem(g, els, np.full((len(g.layers), 1), 1e-4), transfer)
        apps.append(AppProblem(AppSpec(str(path), period, len(apps) + 1, name), g, p))
    mp = MultiProblem(apps)
    plan = make_multiplan(mp, search_multi(mp, pop_size=4, generations=1))
    plan.save(tmp_path / "m.json")
    out = tmp_path / "report.json"
    r = runner.invoke(app, ["run-multi", str(tmp_path / "m.json"), "--frames", "4", "--warmup",
                            "1", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "measured response times" in r.output
    rep = json.loads(out.read_text())
    assert [a["name"] for a in rep["apps"]] == ["x", "y"]
    assert all(a["notes"]["missed"] == 0 and a["checked_frames"] == 4 for a in rep["apps"])
    bad = runner.invoke(app, ["run-multi", str(tmp_path / "missing.json")])
    assert isinstance(bad.exception, InputError)
    # lanes run on GPU elements only (tests/multi/test_engine_multi_lanes runs them): on a CPU
    # element they are refused with a line naming the application and the element
    d = json.loads((tmp_path / "m.json").read_text())
    d["apps"][0]["plan"]["mapping"]["lanes"] = {f"cpu{core}": 4}
    (tmp_path / "lanes.json").write_text(json.dumps(d))
    bad = runner.invoke(app, ["run-multi", str(tmp_path / "lanes.json")])
    assert isinstance(bad.exception, InputError)
    assert (f"application x: element 'cpu{core}' is a cpu element: only GPU elements run "
            "lanes (asked for 4)") in str(bad.exception)


def test_profile_dir_finds_model_dot_profile_json(tmp_path):
    from hetflow.multi.problem import find_profile
    from hetflow.multi.spec import parse_app_spec

    (tmp_path / "squeezenet1_0.profile.json").write_text("{}")
    spec = parse_app_spec("squeezenet1_0:period=40ms")
    assert find_profile(spec, tmp_path, None) == tmp_path / "squeezenet1_0.profile.json"


def test_streams_of_one_model_share_one_profile_load_and_cost_model(models):
    from hetflow.multi.problem import load_multi_problem
    from hetflow.multi.spec import parse_app_specs
    from hetflow.platform import resolve_platform

    specs = parse_app_specs([f"{models}/a.onnx:period=40ms:name=cam1",
                             f"{models}/a.onnx:period=50ms:name=cam2",
                             f"{models}/b.onnx:period=60ms:streams=4"])
    mp = load_multi_problem(specs, resolve_platform("hikey970"), models / "profiles")
    cam1, cam2, b = mp.apps
    assert cam1.problem is cam2.problem and cam1.graph is cam2.graph
    assert b.problem is not cam1.problem
    assert (cam1.spec.period, cam2.spec.period, b.spec.streams) == (0.04, 0.05, 4)


def test_the_profiles_busy_copies_run_slows_each_element_as_map_has_it(models, tmp_path):
    """A profile whose busy-copies run read every CPU element 1.5x slower than alone: the
    multi-application cost model takes the step "contention" that `hetflow map` takes, and
    records it; without the run the times are the profile's alone."""
    from hetflow.multi.problem import load_multi_problem
    from hetflow.multi.spec import parse_app_specs
    from hetflow.platform import resolve_platform
    from hetflow.profile.profile import Profile

    prof = Profile.load(models / "profiles" / "a.hikey970.profile.json")
    cpus = [e for e, d in prof.elements.items() if d.get("kind") == "cpu"]
    for e in cpus:  # an estimate has no whole-model run: say it took 10 ms alone
        prof.whole_model[e] = {"median": 0.01, "p90": 0.01, "max": 0.01}
    src = prof.save(tmp_path / "a.alone.profile.json")
    prof.calibration["busy_fps"] = {e: 1 / 0.015 for e in cpus}
    busy = prof.save(tmp_path / "a.busy.profile.json")
    platform = resolve_platform("hikey970")

    def app(path):
        spec = parse_app_specs([f"{models}/a.onnx:period=40ms:profile={path}"])
        return load_multi_problem(spec, platform).apps[0]

    alone, contended = app(src), app(busy)
    assert [s["step"] for s in alone.steps] == ["profile"]
    assert [s["step"] for s in contended.steps] == ["profile", "contention"]
    j = [e.name for e in alone.problem.elements].index(cpus[0])
    assert (contended.problem.layer_times[:, j].sum()
            == pytest.approx(1.5 * alone.problem.layer_times[:, j].sum(), rel=1e-6))
