"""`hetflow map` plans as `hetflow bench` does: given the profile the bench made and the
calibration it wrote (what its baselines measured), `map` applies the same calibration steps,
runs the same search and returns the plan the bench chose before its pilots (one pilot)."""
import json
import os

import onnx
import pytest

from hetflow.model.synthetic import random_cnn_model

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")


def test_map_with_the_benchs_calibration_returns_the_benchs_plan(hetflow, tmp_path,
                                                                 monkeypatch):
    from hetflow.bench.core import BenchSettings, bench_model
    from hetflow.plan.plan import Plan
    from hetflow.platform import resolve_platform

    monkeypatch.setenv("HETFLOW_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "small.onnx"
    onnx.save(random_cnn_model(10, 4), model)
    cores = sorted(os.sched_getaffinity(0))[:2]
    plat = tmp_path / "two.yaml"
    plat.write_text(f"name: two\nclusters: [{{name: cpu, cores: {cores}}}]\n")
    settings = BenchSettings(strategies=["pipeline"], pilot_candidates=1, refine=False,
                             balanced_latency_share=None, frames=30, warmup=5,
                             plan_seconds=0.1, baseline_seconds=0.3, profile_repeats=3)
    report = tmp_path / "rep"
    mb = bench_model(str(model), resolve_platform(str(plat)), settings, report_dir=report)
    row = next(r for r in mb.rows if r["name"] == "hetflow pipeline")
    benched = Plan.load(report / f"{mb.model}.pipeline.plan.json")
    calibration = report / f"{mb.model}.calibration.json"
    saved = json.loads(calibration.read_text())
    assert set(saved["contention"]["busy_fps"]) == {"cpu0", "cpu1"}  # the parallel baseline's
    (profile,) = (tmp_path / "cache" / "profiles").glob("*.json")

    out = tmp_path / "map.plan.json"
    code, _, err = hetflow("map", model, "--profile", profile, "-p", plat, "-s", "pipeline",
                           "--calibration", calibration, "-o", out)
    assert code == 0, err
    mapped = Plan.load(out)
    assert mapped.mapping.key() == benched.mapping.key()
    assert mapped.predicted["throughput"] == pytest.approx(row["predicted_throughput"],
                                                           rel=1e-9)
    steps = [s["step"] for s in mapped.search["calibration"]]
    assert steps == [s["step"] for s in benched.search["calibration"]] == ["profile",
                                                                           "contention"]
    # without the calibration: the profile alone (a bench's profile has no busy-copies run)
    code, _, err = hetflow("map", model, "--profile", profile, "-p", plat, "-s", "pipeline",
                           "-o", out)
    assert code == 0, err
    assert [s["step"] for s in Plan.load(out).search["calibration"]] == ["profile"]


def test_a_calibration_file_that_is_not_one_is_refused_naming_it(tmp_path):
    from hetflow.errors import InputError
    from hetflow.mapping.calibration import load_calibration

    bad = tmp_path / "bad.calibration.json"
    bad.write_text(json.dumps({"contention": {}, "batches": {}}))
    with pytest.raises(InputError, match="bad.calibration.json: unknown step 'batches'"):
        load_calibration(bad)
    bad.write_text(json.dumps({"model": "resnet18", "contention": {}}))
    with pytest.raises(InputError, match="made for model 'resnet18', not 'alexnet'"):
        load_calibration(bad, "alexnet", "vm")
    assert load_calibration(bad, "resnet18", "vm") == {"contention": {}}
    bad.write_text("[1, 2]")
    with pytest.raises(InputError, match="expected a JSON object"):
        load_calibration(bad)
