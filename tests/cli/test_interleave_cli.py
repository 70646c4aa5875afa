"""A plan with interleaved phase orders through `hetflow run`: the local engine runs it with
outputs checked (the Ray engine's run of such plans is in tests/runtime/test_ray_engine.py)."""
import json
import os

import onnx

from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.plan.mapping import Mapping
from hetflow.plan.plan import Plan
from hetflow.model.reader import load_model
from hetflow.model.synthetic import random_cnn_model
from hetflow.platform.spec import ProcessingElement


def round_trip_plan(tmp_path, round_frames: int):
    model = tmp_path / "tiny.onnx"
    onnx.save(random_cnn_model(8, seed=5), model)
    graph = load_model(model)
    names = [l.name for l in graph.layers]
    assignment = {l: "cpu0" if i % 3 else "cpu1" for i, l in enumerate(names)}
    cores = sorted(os.sched_getaffinity(0))
    elements = {e: ProcessingElement(e, "cpu", (cores[i % len(cores)],))
                for i, e in enumerate(("cpu0", "cpu1"))}
    app = cnn_to_csdf(graph, assignment, "maximal")
    offsets = {a: [1] * (len(ps) - 1) + [0] for a, ps in app.phases.items() if len(ps) > 1}
    mapping = Mapping(assignment, "maximal", interleave=offsets, round_frames=round_frames)
    plan = Plan(graph.name, graph.model_hash, str(model), "test", mapping, app, elements, 2,
                {"throughput": 0.0, "latency": 0.1}, "test")
    return plan.save(tmp_path / "plan.json")


def test_run_executes_an_interleaved_plan_with_outputs_checked(hetflow, tmp_path):
    for k in (1, 2):
        path = round_trip_plan(tmp_path, k)
        assert json.loads(path.read_text())["mapping"]["interleave"]
        code, out, err = hetflow("run", path, "--frames", "30", "--warmup", "2", "--check", "all",
                                 "--json")
        assert code == 0, err
        report = json.loads(out)
        assert report["frames"] == 30 and report["checked_frames"] == 30
