"""SIGINT and SIGTERM sent to `hetflow` commands in a subprocess at their steps (known from the
lines on stderr): each exits with 130 or 143 within the bound, writes what it measured as
strict JSON marked interrupted with the signal's name, and leaves no child process; a second
process is refused a report folder or output file that the first is writing."""
import os
import signal
import subprocess
import time

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from hetflow.cli.main import app
from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.io import lock_path
from hetflow.plan.mapping import Mapping
from hetflow.plan.plan import Plan
from hetflow.mapping.problem import Problem
from hetflow.model.reader import load_model
from hetflow.model.synthetic import random_cnn_model
from hetflow.multi.multiplan import make_multiplan
from hetflow.multi.problem import AppProblem, MultiProblem
from hetflow.multi.search import search_multi
from hetflow.multi.spec import AppSpec
from hetflow.platform.spec import ProcessingElement

from signal_helpers import Hetflow, assert_stopped, strict_json

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
INT, TERM = signal.SIGINT, signal.SIGTERM


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A folder with a tiny model, a two-stage plan of it on two cores, and a profile cache."""
    d = tmp_path_factory.mktemp("signals")
    model = d / "tiny.onnx"
    onnx.save(random_cnn_model(8, seed=5), model)
    graph = load_model(model)
    names = [l.name for l in graph.layers]
    assignment = {l: "cpu0" if i < len(names) // 2 else "cpu1" for i, l in enumerate(names)}
    cores = sorted(os.sched_getaffinity(0))
    elements = {e: ProcessingElement(e, "cpu", (cores[i],)) for i, e in enumerate(("cpu0", "cpu1"))}
    plan = Plan(graph.name, graph.model_hash, str(model), "test", Mapping(assignment, "paper"),
                cnn_to_csdf(graph, assignment, "paper"), elements, 2, {"throughput": 0.0}, "test")
    plan.save(d / "plan.json")
    return d


def hetflow(work, *args):
    return Hetflow(*args, cwd=work, cache=work / "cache")


BENCH = ("bench", "tiny.onnx", "--quick", "--strategies", "pipeline", "--pilots", "1")


@pytest.mark.parametrize("step, sig, extra", [
    ("profiling tiny", INT, ()), ("baseline: whole model", TERM, ()),
    ("baseline: parallel copies", INT, ()), ("pilot:", TERM, ("--pilots", "3")),
    ("running plan pipeline", INT, ()), ("head to head 1/", TERM, ("--head-to-head", "2"))])
def test_bench_stops_at_each_step_and_keeps_what_it_measured(work, tmp_path, step, sig, extra):
    report = tmp_path / "r"
    # (--json: its steps still said; a later --pilots overrides BENCH's)
    h = hetflow(work, *BENCH, *extra, "--report", report, "--json")
    h.wait_for(step)
    time.sleep(0.3)  # inside the step
    assert_stopped(h, sig)
    written = strict_json((report / "bench.json").read_text())
    printed = strict_json(h.out)
    for data in (written, printed):
        assert data["interrupted"] is True and data["signal"] == signal.Signals(sig).name
    # the model cut short: the steps it began, the one signalled last
    assert step in written["interrupted_model"]["steps"][-1]
    assert not (report / ".hetflow.lock").exists()


def test_a_second_bench_is_refused_the_report_folder_the_first_writes(work, tmp_path):
    report = tmp_path / "r"
    # (many head-to-head rounds: still running when the second has been refused)
    first = hetflow(work, *BENCH, "--head-to-head", "50", "--report", report)
    first.wait_for("profiling tiny|baseline")
    second = hetflow(work, *BENCH, "--report", report)
    assert second.finish() == 2
    assert f"{report}: another hetflow process (pid {first.proc.pid}) is writing it" in \
        second.stderr()
    assert_stopped(first, TERM)
    assert strict_json((report / "bench.json").read_text())["interrupted"] is True


def test_run_reports_the_frames_so_far(work):
    started = time.monotonic()
    h = hetflow(work, "run", "plan.json", "--frames", "10000000")
    h.wait_for("preparing")
    time.sleep(1.5)  # sessions built, frames flowing
    ready = time.monotonic() - started
    assert_stopped(h, INT)
    assert "plan: interrupted after" in h.out
    # with --json it says nothing on stderr: signalled once the same time has passed, twice
    h = hetflow(work, "run", "plan.json", "--frames", "10000000", "--json")
    time.sleep(2 * ready)
    assert_stopped(h, TERM)
    report = strict_json(h.out)
    assert report["interrupted"] is True and report["signal"] == "SIGTERM"
    assert report["frames"] > 0


def test_profile_writes_what_it_measured(work, tmp_path):
    out = tmp_path / "p.json"
    h = hetflow(work, "profile", "tiny.onnx", "-o", out, "--repeats", "100000")
    h.wait_for("profiling tiny")
    time.sleep(2.0)
    assert_stopped(h, TERM)
    prof = strict_json(out.read_text())
    assert prof["meta"]["interrupted"] == "SIGTERM"
    assert "interrupted: wrote the profile measured so far" in h.stderr()
    # a partial profile is not mapped with as if it were whole
    r = CliRunner().invoke(app, ["map", str(work / "tiny.onnx"), "--profile", str(out)])
    assert f"{out}: the profile was interrupted (SIGTERM) and is partial" in str(r.exception)
    r = CliRunner().invoke(app, ["map-multi", f"{work / 'tiny.onnx'}:period=50ms:profile={out}"])
    assert f"{out}: the profile was interrupted (SIGTERM) and is partial" in str(r.exception)


def test_map_stops_in_a_pilot_and_writes_no_plan(work, tmp_path):
    prof = tmp_path / "p.json"
    r = CliRunner().invoke(app, ["profile", str(work / "tiny.onnx"), "-o", str(prof),
                                 "--repeats", "3", "--no-contention"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "plan.json"
    h = hetflow(work, "map", "tiny.onnx", "--profile", prof, "--pilots", "3", "-o", out)
    h.wait_for("pilot:")
    assert_stopped(h, INT)
    assert not out.exists()
    # a plan file another live process is writing is refused before the search, and kept
    other = subprocess.Popen(["sleep", "30"])
    try:
        lock_path(out).write_text(f"{other.pid}\n")
        r = CliRunner().invoke(app, ["map", str(work / "tiny.onnx"), "--profile", str(prof),
                                     "-o", str(out)])
        assert f"{out}: another hetflow process (pid {other.pid}) is writing it" in \
            str(r.exception)
        assert not out.exists()
    finally:
        other.kill()
        other.wait()


@pytest.fixture(scope="module")
def multiplan(work):
    """Two tiny applications on two of this machine's cores, one process each."""
    els = [ProcessingElement(f"cpu{c}", "cpu", (c,), cluster="cpu")
           for c in sorted(os.sched_getaffinity(0))[:2]]
    apps = []
    for name, seed, period in (("x", 31, 0.02), ("y", 32, 0.03)):
        path = work / f"{name}.onnx"
        onnx.save(random_cnn_model(5, seed=seed), path)
        g = load_model(path)
        p = Problem(g, els, np.full((len(g.layers), len(els)), 1e-4),
                    lambda n, s, d: 0.0 if s == d else 2e-5 + n * 1e-9)
        apps.append(AppProblem(AppSpec(str(path), period, len(apps) + 1, name), g, p))
    mp = MultiProblem(apps)
    path = work / "m.json"
    make_multiplan(mp, search_multi(mp, pop_size=4, generations=1)).save(path)
    return path


def test_run_multi_stops_its_element_processes(work, multiplan, tmp_path):
    out = tmp_path / "report.json"
    h = hetflow(work, "run-multi", multiplan, "--frames", "1000000", "--engine", "processes",
                "-o", out)
    h.wait_for("running 2 applications")
    children = h.children()
    assert children  # the element processes
    time.sleep(1.0)
    assert_stopped(h, TERM, children)
    data = strict_json(out.read_text())
    assert data["interrupted"] is True and data["signal"] == "SIGTERM"
    assert all(a["frames"] > 0 for a in data["apps"])


def test_map_multi_stops_its_search(work, tmp_path):
    profiles = tmp_path / "profiles"
    for name in ("x", "y"):
        r = CliRunner().invoke(app, ["profile", str(work / f"{name}.onnx"), "--platform",
                                     "hikey970", "--estimate", "-o",
                                     str(profiles / f"{name}.hikey970.profile.json")])
        assert r.exit_code == 0, r.output
    out = tmp_path / "mm.json"
    h = hetflow(work, "map-multi", "x.onnx:period=20ms", "y.onnx:period=30ms", "--profile-dir",
                profiles, "--platform", "hikey970", "--generations", "100000", "-o", out)
    h.wait_for("searching")
    time.sleep(1.0)
    assert_stopped(h, INT)
    assert not out.exists()


def test_run_on_ray_stops_and_leaves_no_ray_process(work):
    pytest.importorskip("ray", reason="the Ray engine needs ray (pip install 'hetflow[ray]')")
    h = hetflow(work, "run", "plan.json", "--engine", "ray", "--frames", "10000000")
    h.wait_for("starting cpu1 on node", timeout=120)
    time.sleep(4.0)  # the workers started (seconds on 2 busy cores), frames flowing
    children = h.children()
    assert children  # Ray's own processes (its store, scheduler, workers)
    assert_stopped(h, TERM, children)
    assert "plan: interrupted after" in h.out, (h.out, h.stderr())
