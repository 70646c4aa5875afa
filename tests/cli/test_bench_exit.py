"""`hetflow bench` refuses bad input before it profiles anything (exit 2, nothing written),
exits 1 when a model's bench failed, 130 when interrupted (bench.json and --json say so), and
through a pipe prints plain progress lines naming where the profiles and results went.

bench_model itself is replaced: these tests are about what the command makes of its outcome."""
import json
import signal

import pytest

import hetflow.bench.core as core
from hetflow.bench.core import ModelBench
from hetflow.errors import RuntimeFault
from patching import patch_everywhere

LAYER = "[/features/features.0/Conv]"  # an ONNX layer name rich would read as markup


def fake_bench(outcomes: dict):
    """bench_model that logs a step, then per model returns a result or raises."""
    def bench_model(model, platform, settings, log, report_dir=None):
        log("profiling")
        what = outcomes[model]
        if isinstance(what, BaseException):
            raise what
        return what(model, platform) if callable(what) else ModelBench(model, platform.name,
                                                                     [], 0.0)
    return bench_model


@pytest.mark.parametrize("args, says", [
    (["nosuchmodel"], "nosuchmodel: no such file, and not a zoo model"),
    (["nosuch/model.onnx"], "nosuch/model.onnx: no such model file"),
    (["--strategies", "pipeline,nosuch"], "unknown strategy 'nosuch'"),
    (["--strategies", " , "], "name at least one strategy"),
    (["--frames", "1"], "--frames"),
    (["--pilots", "0"], "--pilots"),
    (["--budget", "0"], "--budget"),
    (["--budget", "-5"], "--budget"),
    (["--max-batch", "0"], "--max-batch"),
])
def test_bad_input_is_refused_before_any_work(hetflow, tmp_path, monkeypatch, args, says):
    patch_everywhere(monkeypatch, core, "bench_model", fake_bench({}))  # would raise KeyError if called
    report = tmp_path / "out"
    code, out, err = hetflow("bench", *args, "--report", report)
    assert code == 2 and says in err and "Traceback" not in err
    assert not report.exists()


def test_an_unwritable_report_folder_is_refused_before_any_work(hetflow, tmp_path):
    (tmp_path / "file").write_text("")
    code, out, err = hetflow("bench", "--report", tmp_path / "file" / "out")
    assert code == 2 and f"{tmp_path / 'file'} is not a folder" in err


def test_a_failed_model_makes_the_bench_exit_one(hetflow, tmp_path, monkeypatch):
    fault = RuntimeFault(f"frame 0: output 'y' differs; produced by stage cpu0 (layers {LAYER})")
    patch_everywhere(monkeypatch, core, "bench_model", fake_bench({"resnet18": None,
                                                         "squeezenet1_0": fault}))
    code, out, err = hetflow("bench", "resnet18", "squeezenet1_0", "--json")
    assert code == 1
    assert f"bench squeezenet1_0: {fault}\n" in err  # one line, the name literal (not markup)
    data = json.loads(out)
    assert [m["model"] for m in data["models"]] == ["resnet18"]
    assert list(data["failed"]) == ["squeezenet1_0"] and data["interrupted"] is False


def test_ctrl_c_writes_what_was_measured_and_exits_130(hetflow, tmp_path, monkeypatch):
    patch_everywhere(monkeypatch, core, "bench_model", fake_bench({"resnet18": None,
                                                         "squeezenet1_0": KeyboardInterrupt()}))
    report = tmp_path / "out"
    code, out, err = hetflow("bench", "resnet18", "squeezenet1_0", "--report", report, "--json")
    assert code == 130 and "hetflow: interrupted" in err
    for data in (json.loads(out), json.loads((report / "bench.json").read_text())):
        assert data["interrupted"] is True
        assert [m["model"] for m in data["models"]] == ["resnet18"]
    assert not (report / "report.html").exists()


def test_a_run_the_engine_cut_short_still_stops_the_bench(hetflow, monkeypatch):
    def cut_short(model, platform):
        try:  # as the engine does: Ctrl-C ends the run, and what it measured is returned
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass
        return ModelBench(model, platform.name, [], 0.0)

    patch_everywhere(monkeypatch, core, "bench_model", fake_bench({"resnet18": cut_short,
                                                         "squeezenet1_0": None}))
    code, out, err = hetflow("bench", "resnet18", "squeezenet1_0", "--json")
    assert code == 130
    data = json.loads(out)
    assert data["interrupted"] is True and [m["model"] for m in data["models"]] == ["resnet18"]
    assert data["models"][0]["notes"]["interrupted"] is True
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_progress_through_a_pipe_is_plain_lines(hetflow, tmp_path, monkeypatch):
    monkeypatch.setenv("HETFLOW_CACHE", str(tmp_path / "cache"))
    patch_everywhere(monkeypatch, core, "bench_model", fake_bench({"resnet18": None}))
    code, out, err = hetflow("bench", "resnet18")
    assert code == 0, err
    assert f"profiles are cached in {tmp_path / 'cache' / 'profiles'}" in err
    assert "hetflow: bench resnet18\nhetflow: resnet18: profiling\n" in err


def test_max_batch_reaches_the_model_s_bench(hetflow, monkeypatch):
    seen = []

    def bench_model(model, platform, settings, log, report_dir=None):
        seen.append(settings.max_batch)
        return ModelBench(model, platform.name, [], 0.0)

    patch_everywhere(monkeypatch, core, "bench_model", bench_model)
    code, out, err = hetflow("bench", "resnet18", "--max-batch", "1", "--json")
    assert code == 0, err
    assert seen == [1] and json.loads(out)["settings"]["max_batch"] == 1
