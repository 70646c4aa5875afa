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


def test_precision_auto_profiles_a_gpu_at_fp32_and_the_first_precision_in_tolerance(
        tmp_path, model_path, monkeypatch):
    """`hetflow profile --precision auto` screens a GPU's reduced precisions as the bench does
    (profile.deviation.screen_gpu_precisions): here fp16 misses the tolerance given, bf16 is
    within it, tf32 is not profiled. The GPU is a platform file's; nothing runs on it."""
    import hetflow.cli.profile_cmd as cmd

    yaml = tmp_path / "g.yaml"
    yaml.write_text("name: g\nclusters:\n  - name: c\n    cores: [0]\n    peak_gflops_per_core: 10\n"
                    "    mem_gbps: 10\ngpus:\n  - {index: 0, name: gpu}\n")
    asked = {}

    def profile_model(graph, platform, elements, **kwargs):
        asked["elements"] = sorted(e.name for e in elements)
        return Profile(graph.name, graph.model_hash, platform.name, platform.platform_hash)

    def deviation(graph, element):
        error = {"fp16": 0.03, "bf16": 0.005, "tf32": 0.001}[element.precision]
        return {"frames": 8, "passed": True, "outputs": [
            {"name": "y", "frames": 8, "rel_l2_worst": error, "rel_l2_median": error,
             "max_abs_worst": 0.1, "max_abs_median": 0.1, "top1_agreement": None}]}

    monkeypatch.setattr(cmd, "profile_model", profile_model)
    monkeypatch.setattr(cmd, "record_deviations", lambda *a, **k: None)
    monkeypatch.setattr("hetflow.profile.deviation.whole_model_deviation", deviation)
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["profile", str(model_path), "-p", str(yaml), "--precision", "auto",
                            "--tolerance", "rel_l2=0.01", "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    gpus = [n for n in asked["elements"] if n.startswith("gpu0")]
    assert gpus == ["gpu0", "gpu0@bf16"]
    meta = json.loads(out.read_text())["meta"]
    assert set(meta["screened"]) == {"gpu0@fp16", "gpu0@tf32"}
    assert set(meta["deviation"]) == {"gpu0@fp16", "gpu0@bf16"}
    bad = runner.invoke(app, ["profile", str(model_path), "-p", str(yaml), "--precision",
                              "auto", "--tolerance", "rel_l2=-1", "-o", str(out)])
    assert "tolerance rel_l2: -1.0 is below zero" in str(bad.exception)
