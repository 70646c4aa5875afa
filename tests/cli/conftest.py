"""Fixtures of the CLI tests: `hetflow` run in this process through its real entry point (exit
code, stdout, stderr), and a tiny model with a two-stage plan to run."""
import os
import sys

import onnx
import pytest

from hetflow.cli.main import main
from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.plan.mapping import Mapping
from hetflow.plan.plan import Plan
from hetflow.model.reader import load_model
from hetflow.model.synthetic import random_cnn_model
from hetflow.platform.spec import ProcessingElement


@pytest.fixture
def hetflow(monkeypatch, capsys):
    """hetflow(*args) -> (exit code, stdout, stderr), through main() as the console script."""
    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["hetflow", *map(str, args)])
        try:
            main(at_once=False)  # a signal must not end the test process
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def one_line_exit_2(result, *says):
    """A `hetflow` fixture result refused as bad input: exit 2 and one line on stderr that
    says each of `says`."""
    code, out, err = result
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1, err
    for s in says:
        assert s in err, err


@pytest.fixture
def plan_file(tmp_path):
    """A tiny random CNN split over two CPU elements, saved as a plan next to its model."""
    model = tmp_path / "tiny.onnx"
    onnx.save(random_cnn_model(8, seed=5), model)
    graph = load_model(model)
    names = [l.name for l in graph.layers]
    assignment = {l: "cpu0" if i < len(names) // 2 else "cpu1" for i, l in enumerate(names)}
    cores = sorted(os.sched_getaffinity(0))
    elements = {e: ProcessingElement(e, "cpu", (cores[i % len(cores)],))
                for i, e in enumerate(("cpu0", "cpu1"))}
    app = cnn_to_csdf(graph, assignment, "paper")
    plan = Plan(graph.name, graph.model_hash, str(model), "test", Mapping(assignment, "paper"),
                app, elements, 2, {"throughput": 0.0}, "test")
    return plan.save(tmp_path / "plan.json")

