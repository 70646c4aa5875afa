"""Plan files carry each element's precision; plans written before precisions load as fp32."""
import json

import onnx
import pytest

from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.errors import InputError
from hetflow.model.reader import load_model
from hetflow.model.synthetic import random_cnn_model
from hetflow.plan.mapping import Mapping
from hetflow.plan.plan import Plan
from hetflow.platform.spec import ProcessingElement


def two_stage_plan(tmp_path, first: ProcessingElement, second: ProcessingElement) -> Plan:
    model = tmp_path / "tiny.onnx"
    onnx.save(random_cnn_model(6, seed=1), model)
    graph = load_model(model)
    names = [l.name for l in graph.layers]
    assignment = {l: first.name if i < len(names) // 2 else second.name
                  for i, l in enumerate(names)}
    return Plan(graph.name, graph.model_hash, str(model), "test", Mapping(assignment, "paper"),
                cnn_to_csdf(graph, assignment, "paper"), {first.name: first, second.name: second},
                2, {"throughput": 0.0}, "test")


def test_precisions_survive_the_plan_file(tmp_path):
    plan = two_stage_plan(tmp_path, ProcessingElement("cpu0@int8", "cpu", (0,), precision="int8"),
                          ProcessingElement("gpu0@fp16", "gpu", (1,), device_index=0,
                                            precision="fp16"))
    path = plan.save(tmp_path / "plan.json")
    data = json.loads(path.read_text())
    assert data["elements"]["cpu0@int8"]["precision"] == "int8"
    loaded = Plan.load(path)
    assert {e: x.precision for e, x in loaded.elements.items()} == {"cpu0@int8": "int8",
                                                                    "gpu0@fp16": "fp16"}


def test_a_plan_written_before_precisions_loads_as_fp32(tmp_path):
    plan = two_stage_plan(tmp_path, ProcessingElement("cpu0", "cpu", (0,)),
                          ProcessingElement("cpu1", "cpu", (1,)))
    path = plan.save(tmp_path / "plan.json")
    data = json.loads(path.read_text())
    assert all("precision" not in e for e in data["elements"].values())  # fp32 is left out
    assert {e.precision for e in Plan.load(path).elements.values()} == {"fp32"}


@pytest.mark.parametrize("name, precision, says", [
    ("cpu0@int8", "fp32", "element 'cpu0@int8' has precision fp32"),
    ("cpu0", "int8", "element 'cpu0' has precision int8"),
])
def test_an_element_whose_name_and_precision_disagree_is_refused(tmp_path, name, precision,
                                                                 says):
    plan = two_stage_plan(tmp_path, ProcessingElement(name, "cpu", (0,)),
                          ProcessingElement("cpu1", "cpu", (1,)))
    data = json.loads(plan.save(tmp_path / "plan.json").read_text())
    data["elements"][name]["precision"] = precision
    with pytest.raises(InputError, match=says):
        Plan.from_dict(data, "plan.json")


def test_an_unknown_precision_is_refused_by_the_schema(tmp_path):
    plan = two_stage_plan(tmp_path, ProcessingElement("cpu0", "cpu", (0,)),
                          ProcessingElement("cpu1", "cpu", (1,)))
    data = json.loads(plan.save(tmp_path / "plan.json").read_text())
    data["elements"]["cpu0"]["precision"] = "fp8"
    with pytest.raises(InputError, match="precision"):
        Plan.from_dict(data, "plan.json")
