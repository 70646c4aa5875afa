"""`hetflow bench --budget`: a tight budget shortens and skips (and says so) and the bench
still ends with the rows it kept; a budget too small for a model's profile fails that model in
one line. Real runs of a small random CNN on two cores; no assertion on how long they took
beyond a generous bound."""
import json
import os

import onnx
import pytest

from hetflow.model.synthetic import random_cnn_model

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")


@pytest.fixture
def small(tmp_path, monkeypatch):
    """(model file, two-core platform file), with the cache in tmp_path."""
    monkeypatch.setenv("HETFLOW_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "small.onnx"
    onnx.save(random_cnn_model(12, 5), model)
    cores = sorted(os.sched_getaffinity(0))[:2]
    plat = tmp_path / "two.yaml"
    plat.write_text(f"name: two\nclusters: [{{name: cpu, cores: {cores}}}]\n")
    return model, plat


def test_a_tight_budget_skips_says_what_and_keeps_the_rows_it_ran(hetflow, small, tmp_path):
    from hetflow.bench.profiles import get_profile
    from hetflow.model import resolve_model
    from hetflow.platform import resolve_platform

    model, plat = small
    # the profile is cached first: the budget then holds the baselines and the plans only. At
    # their least the baselines are estimated 1.6 s (they take over 1 s), the three plan kinds
    # 7 s (fixed overheads, whatever the machine's speed): 6 s keeps the baselines on a slow
    # machine and cannot keep every part of the plans on a fast one
    get_profile(resolve_model(str(model), fuse=True), resolve_platform(str(plat)), 3,
                lambda msg: None)
    report = tmp_path / "out"
    code, out, err = hetflow("bench", model, "-p", plat, "--budget", "6", "--report", report)
    assert code == 0, err
    data = json.loads((report / "bench.json").read_text())
    assert data["settings"]["budget_seconds"] == 6.0 and not data["failed"]
    mb = data["models"][0]
    notes = mb["notes"]["budget"]
    assert 0 < notes["seconds"] <= 6.0
    assert notes["skipped"] and notes["scaled"]  # shortened, and still some parts skipped
    assert notes["spent"] < 6.0 + 20  # generous: the point is that it ends
    names = [r["name"] for r in mb["rows"]]
    assert names[:2] == ["peak single (cpu0-1)", "parallel copies"]
    for r in mb["rows"]:
        assert r.get("infeasible") or r["throughput"] > 0
        if r["kind"] == "plan" and not r.get("infeasible"):
            assert r["checked_frames"] == 8  # a kept plan ran checked, if shortened
    for part in notes["skipped"]:  # a skipped plan kind has no row
        if part.startswith("plan "):
            assert f"hetflow {part[5:]}" not in names
    # said on the way and under the table
    for part in notes["skipped"]:
        assert f"budget: skipping {part} (" in err
    assert "skipped: " + ", ".join(notes["skipped"]) in " ".join(out.split())


def test_a_budget_too_small_for_the_profile_fails_the_model_in_one_line(hetflow, small):
    model, plat = small
    code, out, err = hetflow("bench", model, "-p", plat, "--budget", "0.01", "--json")
    assert code == 1 and "Traceback" not in err
    data = json.loads(out)
    assert list(data["failed"]) == [str(model)] and data["models"] == []
    line = next(l for l in err.splitlines() if l.startswith(f"bench {model}: "))
    assert "of budget for small is too small" in line and "its profile and baselines" in line


def test_quick_keeps_a_budget_that_goes_on_at_the_minimums_when_a_model_needs_more(hetflow,
                                                                                  small, monkeypatch):
    from hetflow.bench.core import BenchSettings, bench_model
    from hetflow.rules import QUICK_MODEL_SECONDS
    from hetflow.platform import resolve_platform

    model, plat = small
    said: list[str] = []
    s = BenchSettings(strategies=["pipeline"], frames=40, warmup=5, pilot_candidates=2,
                      budget_seconds=0.01, budget_strict=False)
    mb = bench_model(str(model), resolve_platform(str(plat)), s, log=said.append)
    notes = mb.notes["budget"]
    assert notes["spent"] > notes["seconds"] == 0.01
    assert any("going on at the minimums, over budget" in m for m in said)
    kinds = [r["name"] for r in mb.rows if r["kind"] == "plan"]
    assert kinds == ["hetflow pipeline", "hetflow balanced"]  # every kind ran, checked
    assert all(r.get("infeasible") or r["checked_frames"] == 8
               for r in mb.rows if r["kind"] == "plan")
    assert any(not r.get("infeasible") for r in mb.rows if r["kind"] == "plan")
    assert {"pilots of pipeline", "re-timing of pipeline"} <= set(notes["skipped"])
    import time

    from hetflow.cli import bench_cmd

    slow = bench_cmd.resolve_platform

    def resolve_platform(*a, **k):  # a platform that takes a second to detect
        time.sleep(1.0)
        return slow(*a, **k)

    monkeypatch.setattr(bench_cmd, "resolve_platform", resolve_platform)
    code, out, err = hetflow("bench", model, "-p", plat, "--quick", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["settings"]["budget_seconds"] == QUICK_MODEL_SECONDS.value
    assert data["settings"]["budget_strict"] is False and not data["failed"]
    assert data["models"][0]["notes"]["budget"]["spent"] < QUICK_MODEL_SECONDS.value
    # --quick bounds the wall: what the command did before the model (the platform) counts
    first = data["models"][0]["notes"]["budget"]["seconds"]
    assert QUICK_MODEL_SECONDS.value - 30 < first <= QUICK_MODEL_SECONDS.value - 1.0
