"""The bench modules as scripts: bad input is one line and exit 2, not a traceback."""
import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["search_bench", "interleave_bench"])
def test_an_unknown_model_is_one_line_and_exit_2(module):
    r = subprocess.run([sys.executable, "-m", f"hetflow.bench.{module}", "no_such_model"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"python -m hetflow.bench.{module}: error: no_such_model: "
                               "no such file, and not a zoo model (known: ")


@pytest.mark.parametrize("module", ["search_bench", "interleave_bench"])
def test_help_is_usage_not_a_model_name(module):
    r = subprocess.run([sys.executable, "-m", f"hetflow.bench.{module}", "--help"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("usage: ")
