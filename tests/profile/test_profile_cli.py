import json

import onnx
import pytest
from typer.testing import CliRunner

from hetflow.cli.main import app
from hetflow.model.synthetic import random_cnn_model
from hetflow.profile import Profile

runner = CliRunner()


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "tiny.onnx"
    onnx.save(random_cnn_model(8, seed=5), path)
    return path


def test_measured_profile(tmp_path, model_path):
    out = tmp_path / "p.json"
    result = runner.invoke(app, ["profile", str(model_path), "--platform", "auto", "-o", str(out),
                                 "--repeats", "2", "--warmup", "1", "--no-comm", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["model"] == "tiny" and not summary["estimated"]
    prof = Profile.load(out)
    assert set(summary["elements"]) == set(prof.layer_times)
    singles = {e for e in prof.layer_times if "-" not in e}  # cpu0, cpu1, ...
    if len(singles) >= 2:  # a copy on each at once: each one's slowdown against alone
        assert set(summary["busy"]) == singles
        for e, v in summary["busy"].items():
            assert v["slowdown"] == pytest.approx(1 / v["fps"] / prof.whole_model[e]["median"])
    table = runner.invoke(app, ["profile", str(model_path), "-o", str(out), "--repeats", "2",
                                "--no-comm", "--element", "cpu0", "--element", "cpu1"])
    assert table.exit_code == 0 and "sum/whole" in table.output and "wrote" in table.output
    assert ("all busy at once: single cores" in table.output) == (len(singles) >= 2)
    quiet = runner.invoke(app, ["profile", str(model_path), "-o", str(out), "--repeats", "2",
                                "--no-comm", "--no-contention", "--json"])
    assert quiet.exit_code == 0 and json.loads(quiet.output)["busy"] == {}


def test_estimated_profile(tmp_path, model_path):
    out = tmp_path / "e.json"
    result = runner.invoke(app, ["profile", str(model_path), "--platform", "hikey970",
                                 "--estimate", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert Profile.load(out).estimated and "cpu->gpu" in result.output


def test_by_default_only_the_searched_configurations_elements_are_profiled(tmp_path, model_path):
    """A 16-core cluster has 72 elements over all its configurations; the search considers a
    curated few, and profiling the rest would only cost time."""
    from hetflow.mapping.from_profile import searched_elements
    from hetflow.platform import resolve_platform

    yaml = tmp_path / "big.yaml"
    yaml.write_text("name: big\nclusters:\n  - name: c\n    cores: [" + ", ".join(map(str, range(16)))
                    + "]\n    peak_gflops_per_core: 10\n    mem_gbps: 10\n")
    plat = resolve_platform(str(yaml))
    searched = {e.name for e in searched_elements(plat)}
    assert len(searched) < len(plat.all_elements())
    for flag, expect in (([], searched), (["--all-elements"], {e.name for e in plat.all_elements()})):
        out = tmp_path / f"p{len(flag)}.json"
        result = runner.invoke(app, ["profile", str(model_path), "--platform", str(yaml),
                                     "--estimate", "-o", str(out), *flag])
        assert result.exit_code == 0, result.output
        assert set(Profile.load(out).layer_times) == expect
