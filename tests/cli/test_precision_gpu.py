"""On a CUDA machine: a GPU element profiled at every precision it runs, each checked against
the fp32 reference, and an fp16 plan mapped, run and checked within the tolerance."""
import json

import onnx
import pytest

from hetflow.model.synthetic import random_cnn_model

torch = pytest.importorskip("torch", reason="GPU precisions need torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="no CUDA device")]


def test_an_fp16_plan_on_the_gpu_is_profiled_mapped_run_and_checked(hetflow, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setenv("HETFLOW_CACHE", str(tmp_path / "cache"))
    model, prof, plan = tmp_path / "tiny.onnx", tmp_path / "p.json", tmp_path / "plan.json"
    onnx.save(random_cnn_model(8, seed=4, channels=16, size=32), model)
    code, _, err = hetflow("profile", model, "--precision", "auto", "--repeats", "3",
                           "--no-contention", "--json", "-o", prof)
    assert code == 0, err
    deviation = json.loads(prof.read_text())["meta"]["deviation"]
    assert {"gpu0@fp16", "gpu0@bf16", "gpu0@tf32"} <= set(deviation)
    code, _, err = hetflow("map", model, "--profile", prof, "--precision", "gpu=fp16",
                           "--strategy", "single", "-o", plan)
    assert code == 0, err
    precisions = {e["name"]: e.get("precision", "fp32")
                  for e in json.loads(plan.read_text())["elements"].values()}
    # with gpu=fp16 the GPU is offered at fp16 only
    assert all(p == "fp16" for n, p in precisions.items() if n.startswith("gpu")), precisions
    code, out, err = hetflow("run", plan, "-n", "50", "--warmup", "5", "--json")
    assert code == 0, err
    accuracy = json.loads(out)["accuracy"]
    assert accuracy["passed"]
    if "fp16" in accuracy["precisions"]:
        assert 0 < max(o["rel_l2_worst"] for o in accuracy["outputs"]) < 0.05
    # auto: the search may choose any precision within the tolerance
    code, _, err = hetflow("map", model, "--profile", prof, "--precision", "auto", "-o", plan)
    assert code == 0, err
    code, out, err = hetflow("run", plan, "-n", "50", "--warmup", "5", "--json")
    assert code == 0 and json.loads(out)["accuracy"]["passed"], err
