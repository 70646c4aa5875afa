"""The maintained tools of scripts/: each parses and answers --help with its usage, without the
hardware or the libraries its real runs need (a GPU, Kiter, torch)."""
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
TOOLS = sorted(p.name for p in SCRIPTS.iterdir() if p.suffix in (".py", ".sh"))


def run(*cmd: object) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120)


def test_the_tools_the_readme_and_tests_name_are_here():
    assert {"gpu_bench.sh", "kiter_reference.py", "export_torchvision.py"} <= set(TOOLS)


@pytest.mark.parametrize("name", TOOLS)
def test_a_tool_answers_help_with_its_usage(name):
    script = SCRIPTS / name
    if script.suffix == ".sh":
        assert run("bash", "-n", script).returncode == 0
        r = run("bash", script, "--help")
    else:
        r = run(sys.executable, script, "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: "), r.stdout + r.stderr


def test_the_help_names_what_each_tool_needs():
    assert "MODEL|FILE.onnx" in run("bash", SCRIPTS / "gpu_bench.sh", "-h").stdout
    assert "path to the kiter binary" in run(sys.executable, SCRIPTS / "kiter_reference.py",
                                             "--help").stdout
    assert "torchvision.models names" in run(sys.executable, SCRIPTS / "export_torchvision.py",
                                             "--help").stdout
