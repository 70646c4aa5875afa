"""Names from a model print literally: ONNX layer names such as "[/features/features.0/Conv]"
are not rich markup, in tables, errors or progress messages."""
import io

import onnx
from rich.console import Console

import hetflow.cli.common as common
import hetflow.model as model
from hetflow.errors import ModelError
from hetflow.model.synthetic import random_cnn_model
from patching import patch_everywhere

NAME = "[/features/features.0/Conv]"


def test_layer_names_in_the_inspect_table(hetflow, tmp_path):
    m = random_cnn_model(4, seed=1)
    for i, node in enumerate(m.graph.node):
        node.name = f"[/features/features.{i}/Conv]"
    path = tmp_path / "brackets.onnx"
    onnx.save(m, path)
    code, out, err = hetflow("inspect", path)
    assert code == 0, err
    assert NAME in out and "[/features/features.3/Conv]" in out


def test_an_error_naming_a_layer(hetflow, monkeypatch):
    def refuse(*args, **kwargs):
        raise ModelError(f"m.onnx: node {NAME}: unsupported operator")

    patch_everywhere(monkeypatch, model, "resolve_model", refuse)
    code, out, err = hetflow("inspect", "m.onnx")
    assert code == 2 and err == f"hetflow: error: m.onnx: node {NAME}: unsupported operator\n"


def test_progress_on_a_terminal(monkeypatch):
    screen = io.StringIO()
    patch_everywhere(monkeypatch, common, "err_console", Console(file=screen, force_terminal=True,
                                                        markup=False))
    with common.progress(f"preparing {NAME}") as log:
        log(f"preparing cpu0 phase 0 {NAME}")
    assert "preparing cpu0 phase 0 [/features/features.0/Conv]" in screen.getvalue()
