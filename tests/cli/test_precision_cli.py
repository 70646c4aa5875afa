"""`--precision` and `--tolerance` on profile, map, run and bench: bad input is one line and
exit 2; an int8 plan is profiled, mapped, run and checked within the tolerance on CPU cores."""
import json

import onnx
import pytest

from hetflow.model.synthetic import random_cnn_model
from tests.cli.conftest import one_line_exit_2


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "tiny.onnx"
    onnx.save(random_cnn_model(6, seed=4, channels=8, size=16), path)
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HETFLOW_CACHE", str(tmp_path / "cache"))


def test_a_precision_an_element_kind_cannot_run_is_refused(hetflow, model, tmp_path, cache):
    one_line_exit_2(hetflow("profile", model, "--precision", "cpu=fp16", "--estimate",
                            "-o", tmp_path / "p.json"), "cpu=fp16", "fp32 or int8")
    one_line_exit_2(hetflow("profile", model, "--precision", "cpu:int8", "--estimate",
                            "-o", tmp_path / "p.json"), "cpu:int8")


def test_a_tolerance_below_zero_is_refused(hetflow, model, tmp_path, plan_file):
    one_line_exit_2(hetflow("map", model, "--profile", tmp_path / "none.json",
                            "--tolerance", "rel_l2=-0.1"), "--tolerance", "below zero")
    one_line_exit_2(hetflow("run", plan_file, "--tolerance", "top1_flips=2"), "top1_flips")
    one_line_exit_2(hetflow("run", plan_file, "--tolerance", "rel=0.1"), "'rel=0.1'")


def test_a_precision_the_profile_never_measured_is_refused_naming_element_and_setting(
        hetflow, model, tmp_path, cache):
    prof = tmp_path / "p.json"
    assert hetflow("profile", model, "--repeats", "1", "--warmup", "0", "--no-comm",
                   "--no-contention", "-o", prof)[0] == 0
    one_line_exit_2(hetflow("map", model, "--profile", prof, "--precision", "cpu=int8"),
                    "@int8", "--precision cpu=int8")


@pytest.mark.slow
def test_an_int8_plan_is_mapped_run_and_checked_within_the_tolerance(hetflow, model, tmp_path,
                                                                     cache):
    prof, plan = tmp_path / "p.json", tmp_path / "plan.json"
    code, _, err = hetflow("profile", model, "--precision", "cpu=int8", "--repeats", "2",
                           "--warmup", "1", "--no-contention", "--json", "-o", prof)
    assert code == 0, err
    recorded = json.loads(prof.read_text())["meta"]["deviation"]
    assert recorded and all(k.endswith("@int8") for k in recorded)
    code, _, err = hetflow("map", model, "--profile", prof, "--precision", "cpu=int8",
                           "--tolerance", "rel_l2=1,top1_flips=1", "-o", plan)
    assert code == 0, err
    elements = json.loads(plan.read_text())["elements"]
    assert {e["precision"] for e in elements.values()} == {"int8"}
    code, out, err = hetflow("run", plan, "-n", "20", "--warmup", "2", "--json")
    assert code == 0, err
    accuracy = json.loads(out)["accuracy"]
    assert accuracy["precisions"] == ["int8"] and accuracy["inputs"] == "random frames"
    assert accuracy["passed"] and accuracy["tolerance"]["rel_l2"] == 1
    worst = max(o["rel_l2_worst"] for o in accuracy["outputs"])
    assert 0 < worst <= 1  # int8 moves the outputs, within the plan's tolerance
    # the same run against a tolerance it cannot meet fails, saying by how much
    code, _, err = hetflow("run", plan, "-n", "20", "--warmup", "2", "--tolerance",
                           f"rel_l2={worst / 2}")
    assert code == 1 and "miss the tolerance" in err and "int8" in err


@pytest.mark.slow
def test_bench_auto_shows_int8_where_it_is_faster(hetflow, tmp_path, cache):
    code, out, err = hetflow("bench", "emotion_ferplus", "--precision", "auto", "--tolerance",
                             "rel_l2=0.5", "--quick", "--pilots", "1", "--strategies", "single",
                             "--json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["models"][0]["rows"]}
    fp32 = next(r for n, r in rows.items() if n.startswith("peak single ("))
    int8 = next(r for n, r in rows.items() if n.startswith("peak single @int8"))
    assert "parallel copies @int8" in rows
    for r in (int8, rows["parallel copies @int8"]):  # the profile's check of their elements
        assert r["deviation"]["outputs"]["output"]["rel_l2_worst"] > 0
    plans = [r for r in rows.values() if r["kind"] == "plan" and not r.get("infeasible")]
    assert plans and all("deviation" in r and r["precisions"] for r in plans)
    if int8["throughput"] > 1.5 * fp32["throughput"]:  # int8 ran 3-6x faster here
        assert any("int8" in r["precisions"] for r in plans), plans
