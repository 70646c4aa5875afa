"""The user's path through the CLI on this machine: profile -> map (with pilot runs) -> run, each
step reading the file the one before wrote."""
import json
import os

import onnx
import pytest
from typer.testing import CliRunner

from hetflow.cli.main import app
from hetflow.plan.plan import Plan
from hetflow.model.synthetic import random_cnn_model

runner = CliRunner()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_profile_map_with_pilots_and_run(tmp_path):
    model = tmp_path / "tiny.onnx"
    onnx.save(random_cnn_model(10, seed=7), model)
    prof, plan_path = tmp_path / "p.json", tmp_path / "plan.json"
    r = runner.invoke(app, ["profile", str(model), "-o", str(prof), "--repeats", "3"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["map", str(model), "--profile", str(prof), "--strategy", "pipeline",
                            "--pilots", "2", "-o", str(plan_path)])
    assert r.exit_code == 0, r.output
    assert "chose " in r.output and f"wrote {plan_path}" in r.output
    plan = Plan.load(plan_path)
    tried = plan.search["pilots"]
    assert len(tried) >= 2 and sum(bool(t.get("chosen")) for t in tried) == 1
    assert next(t for t in tried if t.get("chosen"))["stages"] == list(plan.app.phases)
    r = runner.invoke(app, ["run", str(plan_path), "--frames", "40", "--warmup", "5", "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert report["throughput"] > 0 and report["checked_frames"] == 8
    assert report["max_abs_error"] < 1e-3


def test_map_pilots_must_be_positive(tmp_path):
    r = runner.invoke(app, ["map", "resnet18", "--profile", str(tmp_path / "none.json"),
                            "--pilots", "0"])
    assert r.exit_code != 0 and "--pilots" in r.output
