"""Which model a plan runs (`runtime.api.load_plan_model`)."""
import pytest

from hetflow.errors import InputError
from hetflow.model import resolve_model
from hetflow.runtime.api import load_plan_model


def _plan(plan_for, graph, source: str):
    plan = plan_for(graph, {l.name: "cpu0" for l in graph.layers})
    plan.model_source = source
    return plan


def test_a_zoo_model_planned_on_another_machine_is_built_here(tmp_path, plan_for):
    graph = resolve_model("squeezenet1_0")
    plan = _plan(plan_for, graph, str(tmp_path / "elsewhere" / "squeezenet1_0-1.onnx"))
    assert load_plan_model(plan).model_hash == graph.model_hash


def test_a_file_that_moved_is_named_unless_the_plan_is_of_a_zoo_model(tmp_path, plan_for):
    graph = resolve_model("squeezenet1_0")
    plan = _plan(plan_for, graph, str(tmp_path / "mine.onnx"))
    plan.model_name = "mine"
    with pytest.raises(InputError, match="mine.onnx"):
        load_plan_model(plan)
