import os

import onnx
import pytest

from hetflow.bench.core import BenchSettings, bench_model


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_bench_of_a_small_model_end_to_end(tmp_path, monkeypatch):
    """Profile, search, pilot, run and check a random CNN on two cores: every plan row is a
    real measured run whose first frames matched the reference."""
    from hetflow.model.synthetic import random_cnn_model
    from hetflow.platform import CpuCluster, Platform

    monkeypatch.setenv("HETFLOW_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "small.onnx"
    onnx.save(random_cnn_model(12, 5), model)
    cores = tuple(sorted(os.sched_getaffinity(0)))[:2]
    plat = Platform("two", (CpuCluster("cpu", cores),))
    settings = BenchSettings(frames=40, warmup=5, plan_seconds=0.2, pilot_seconds=0.1,
                             baseline_seconds=0.3, profile_repeats=3)
    mb = bench_model(str(model), plat, settings, report_dir=tmp_path / "rep")
    rows = {r["name"]: r for r in mb.rows}
    assert {"parallel copies", "hetflow pipeline", "hetflow single"} <= set(rows)
    for name in ("hetflow pipeline", "hetflow single"):
        r = rows[name]
        assert r["throughput"] > 0 and r["checked_frames"] == 8 and r["max_abs_error"] < 1e-3
        assert r["predicted_throughput"] > 0 and r["vs_parallel"] > 0
        if r["pilots"]:  # several candidates: exactly one chosen, and it is the run's plan
            chosen = [p for p in r["pilots"] if p.get("chosen")]
            assert len(chosen) == 1 and chosen[0]["stages"] == r["stages"]
    assert (tmp_path / "rep" / f"{mb.model}.single.plan.json").exists()
    basis = mb.notes["prediction_basis"]
    assert set(basis["plan_stage_s"]) >= {"pipeline", "single"}
