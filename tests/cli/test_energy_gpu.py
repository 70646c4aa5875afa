"""On a CUDA machine with NVML's energy counter: the profile reads the GPU's idle and busy
power, and a plan's predicted energy per frame is within 15% of what its run measures."""
import json

import onnx
import pytest

from hetflow.backends.energy import nvml_meters
from hetflow.model.synthetic import random_cnn_model

torch = pytest.importorskip("torch", reason="GPU energy needs torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="no CUDA device")]


def test_a_gpu_plans_predicted_energy_is_what_its_run_measures(hetflow, tmp_path, monkeypatch):
    meters, missing = nvml_meters({"gpu0": 0})
    if not meters:
        pytest.skip(f"no NVML energy counter: {missing['gpu0']}")
    monkeypatch.setenv("HETFLOW_CACHE", str(tmp_path / "cache"))
    model, prof, plan = tmp_path / "m.onnx", tmp_path / "p.json", tmp_path / "plan.json"
    onnx.save(random_cnn_model(10, seed=3, channels=64, size=64), model)
    code, out, err = hetflow("profile", model, "-e", "gpu0", "--repeats", "3",
                             "--no-contention", "--no-comm", "--json", "-o", prof)
    assert code == 0, err
    power = json.loads(prof.read_text())["power"]
    assert power["idle"]["gpu0"]["method"] == "nvml" and power["idle"]["gpu0"]["reliable"]
    busy = power["busy"]["gpu0"]
    assert "1,1" in busy and all(e["parts"]["gpu0"]["watts"] > power["idle"]["gpu0"]["watts"]
                                 for e in busy.values())
    code, out, err = hetflow("map", model, "--profile", prof, "-s", "single", "--json",
                             "-o", plan)
    assert code == 0, err
    predicted = json.loads(out)["predicted"]
    assert predicted["energy_method"] == "nvml"
    frames = int(max(500, predicted["throughput"] * 5))  # a steady window of seconds
    code, out, err = hetflow("run", plan, "-n", frames, "--warmup", frames // 10, "--json")
    assert code == 0, err
    energy = json.loads(out)["energy"]
    assert energy["method"] == {"gpu0": "nvml"} and energy["measured"], energy
    assert energy["joules_per_frame"] == pytest.approx(predicted["energy_per_frame"], rel=0.15)
