"""Every --json output and every file the commands write is strict JSON (no NaN or Infinity,
which strict parsers refuse); inputs hetflow adjusts or refuses say so in one line."""
import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from hetflow.errors import InputError
from hetflow.plan.plan import Plan
from hetflow.mapping.problem import Problem
from hetflow.model.reader import load_model
from hetflow.model.synthetic import random_cnn_model
import hetflow.multi.run as multi_run
from hetflow.multi.multiplan import make_multiplan
from hetflow.multi.problem import AppProblem, MultiProblem
from hetflow.multi.search import search_multi
from hetflow.multi.spec import AppSpec
from hetflow.multi.report import MultiRunReport
from hetflow.platform.spec import ProcessingElement
from hetflow.runtime.report import RunReport, latency_stats

from signal_helpers import strict_json
from patching import patch_everywhere


def test_every_json_output_and_written_file_is_strict(hetflow, plan_file, tmp_path):
    model = plan_file.parent / "tiny.onnx"
    prof = tmp_path / "profiles" / "tiny.hikey970.profile.json"
    plan, mplan, trace = tmp_path / "mapped.json", tmp_path / "m.json", tmp_path / "t.json"
    runs = [
        ["inspect", model, "--json"],
        ["zoo", "list", "--json"],
        ["platform", "show", "hikey970", "--json"],
        ["platform", "configs", "hikey970", "--json", "--limit", "3"],
        ["profile", model, "-p", "hikey970", "--estimate", "-o", prof, "--json"],
        ["map", model, "--profile", prof, "-p", "hikey970", "-o", plan, "--json"],
        ["run", plan_file, "--frames", "20", "--warmup", "2", "--trace", trace, "--json"],
        ["map-multi", f"{model}:period=50ms", "--profile-dir", prof.parent, "-p", "hikey970",
         "--pop-size", "4", "--generations", "1", "-o", mplan, "--json"],
    ]
    for args in runs:
        code, out, err = hetflow(*args)
        assert code == 0, f"{args}: {err}"
        strict_json(out)
    for written in (prof, plan, trace, mplan):
        strict_json(written.read_text())


def cut_short_run(*args, **kwargs) -> MultiRunReport:
    """What a run-multi stopped before its second frame reports: no rate, no percentiles."""
    app = RunReport("x", 1, 0, float("nan"), latency_stats([]), complete=False)
    return MultiRunReport([app], {"cpu0": float("nan")}, 0.01, complete=False)


def test_multi_json_outputs_are_strict(hetflow, tmp_path, monkeypatch):
    """A run cut short before its figures could be taken (a rate of one frame, percentiles of
    none) still prints and writes strict JSON, those figures as null."""
    core = sorted(os.sched_getaffinity(0))[0]
    els = [ProcessingElement(f"cpu{core}", "cpu", (core,), cluster="cpu")]
    apps = []
    for name, seed, period in (("x", 41, 0.05), ("y", 42, 0.06)):
        path = tmp_path / f"{name}.onnx"
        onnx.save(random_cnn_model(4, seed=seed), path)
        g = load_model(path)
        p = Problem(g, els, np.full((len(g.layers), 1), 1e-4),
                    lambda n, s, d: 0.0 if s == d else 2e-5 + n * 1e-9)
        apps.append(AppProblem(AppSpec(str(path), period, len(apps) + 1, name), g, p))
    mp = MultiProblem(apps)
    mplan = tmp_path / "m.json"
    make_multiplan(mp, search_multi(mp, pop_size=4, generations=1)).save(mplan)
    strict_json(mplan.read_text())
    patch_everywhere(monkeypatch, multi_run, "run_multiplan", cut_short_run)
    report = tmp_path / "r.json"
    code, out, err = hetflow("run-multi", mplan, "-o", report, "--json")
    assert code == 130, err
    for data in (strict_json(out), strict_json(report.read_text())):
        assert data["interrupted"] is True and data["apps"][0]["throughput"] is None
        assert data["apps"][0]["latency"]["p99"] is None


def edited_plan(plan_file, edit) -> str:
    d = json.loads(plan_file.read_text())
    edit(d["app"]["phases"])
    plan_file.write_text(json.dumps(d))
    return str(plan_file)


def test_a_layer_in_two_phases_is_refused_naming_it(hetflow, plan_file):
    def twice(phases):
        a, b = list(phases)
        phases[b][0]["layers"].append(phases[a][0]["layers"][0])

    first = json.loads(plan_file.read_text())["app"]["phases"]
    layer = next(iter(first.values()))[0]["layers"][0]
    code, out, err = hetflow("run", edited_plan(plan_file, twice), "--frames", "4")
    assert code == 2
    assert f"layer {layer!r} is in app.phases twice" in err and err.count("\n") == 1


def test_a_layer_left_out_of_every_phase_and_assignment_is_refused(hetflow, plan_file):
    d = json.loads(plan_file.read_text())
    actor = next(iter(d["app"]["phases"]))
    layer = d["app"]["phases"][actor][-1]["layers"].pop()
    for m in (d["app"]["assignment"], d["mapping"]["assignment"]):
        del m[layer]
    plan_file.write_text(json.dumps(d))
    with pytest.raises(InputError) as e:  # the file itself agrees with itself
        Plan.load(plan_file).check_covers([layer], "p")
    assert f"layer {layer!r}" in str(e.value)
    code, out, err = hetflow("run", plan_file, "--frames", "4")
    assert code == 2 and f"layer {layer!r} of model" in err and "left out" in err


def test_a_warmup_over_a_quarter_of_the_frames_is_said(hetflow, plan_file):
    code, out, err = hetflow("run", plan_file, "--frames", "20", "--warmup", "10", "--check",
                             "none")
    assert code == 0, err
    assert "--warmup 10 is more than a quarter of --frames 20: the first 5 frames are left out" \
        in err


def test_a_symbolic_batch_is_taken_as_one_and_said_once(hetflow, tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")],
                                            "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    path = tmp_path / "batch.onnx"
    onnx.save(m, path)
    code, out, err = hetflow("inspect", path, "--json")
    assert code == 0, err
    assert strict_json(out)
    line = (f"hetflow: {path}: input 'x' has a symbolic batch dimension 'N': taken as batch 1 "
            f"(another size: --input-shape x=B,3,8,8)")
    assert err.count(line) == 1
