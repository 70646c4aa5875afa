"""The `hetflow` entry point turns usage errors and HetflowErrors into one-line messages with
their exit codes, never a traceback (typer >= 0.20 raises its own copies of click's errors)."""
import subprocess
import sys

import pytest


def hetflow(*args):
    return subprocess.run([sys.executable, "-m", "hetflow", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args, says", [
    (["map", "resnet18"], "Missing option '--profile'"),
    (["run"], "Missing argument 'PLAN.json'"),
    (["no-such-command"], "No such command 'no-such-command'"),
    (["inspect", "/no/such/model.onnx"], "hetflow: error: "),
])
def test_usage_and_input_errors_are_one_message_not_a_traceback(args, says):
    r = hetflow(*args)
    assert r.returncode != 0
    assert says in r.stderr and "Traceback" not in r.stderr


def test_help_exits_zero():
    r = hetflow("--help")
    assert r.returncode == 0 and "map-multi" in r.stdout


def test_inspect_counts_the_layers_profile_map_and_bench_use(hetflow):
    import json

    from hetflow.model import resolve_model

    code, out, _ = hetflow("inspect", "resnet18", "--json")
    assert code == 0
    assert len(json.loads(out)["layers"]) == len(resolve_model("resnet18", fuse=True).layers)
    code, out, _ = hetflow("inspect", "resnet18", "--json", "--no-fuse")
    assert len(json.loads(out)["layers"]) == len(resolve_model("resnet18", fuse=False).layers)
