"""`hetflow run` exits 0 only when the run completed and its outputs checked out: 1 when the
outputs differ from the reference, 130 when interrupted (after reporting what was measured),
2 for bad options; no trace is left by a failed run."""
import json

import hetflow.runtime.api as api
import hetflow.runtime.check as check
from hetflow.runtime.report import RunReport, latency_stats
from patching import patch_everywhere


def test_a_completed_run_exits_zero(hetflow, plan_file):
    code, out, err = hetflow("run", plan_file, "--frames", "20", "--warmup", "2", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["interrupted"] is False and report["checked_frames"] == 8


def test_an_output_mismatch_exits_one_and_leaves_no_trace(hetflow, plan_file, monkeypatch):
    monkeypatch.setattr(check, "ATOL", -1.0)  # no output can be close enough: a real mismatch
    trace = plan_file.parent / "t.json"
    code, out, err = hetflow("run", plan_file, "--frames", "20", "--trace", trace)
    assert code == 1
    assert "hetflow: error: frame 0: output" in err and "differs from the reference" in err
    assert not trace.exists() and "Traceback" not in err


def interrupted_run(plan, graph, frames, warmup, *args, **kwargs) -> RunReport:
    """What the engine returns when Ctrl-C ends a run: the frames measured so far."""
    return RunReport("plan", 12, 2, 480.0, latency_stats([2e-3] * 10), complete=False)


def test_an_interrupted_run_reports_what_it_measured_and_exits_130(hetflow, plan_file,
                                                                  monkeypatch):
    patch_everywhere(monkeypatch, api, "run_plan", interrupted_run)
    code, out, err = hetflow("run", plan_file, "--json")
    assert code == 130 and "hetflow: interrupted" in err
    report = json.loads(out)
    assert report["interrupted"] is True and report["frames"] == 12
    code, out, err = hetflow("run", plan_file)
    assert code == 130 and "plan: interrupted after 12 frames" in out


def test_ctrl_c_before_the_run_exits_130(hetflow, plan_file, monkeypatch):
    def cut(*args, **kwargs):
        raise KeyboardInterrupt

    patch_everywhere(monkeypatch, api, "run_plan", cut)
    code, out, err = hetflow("run", plan_file, "--json")
    assert code == 130 and out == "" and "hetflow: interrupted" in err


def test_progress_through_a_pipe_is_plain_lines(hetflow, plan_file):
    code, out, err = hetflow("run", plan_file, "--frames", "20", "--warmup", "2")
    assert code == 0, err
    assert err.startswith("hetflow: preparing sessions ...\nhetflow: preparing cpu0 phase 0")
    assert "measured" in out


def test_the_run_says_which_elements_delivered_the_frames(hetflow, plan_file, monkeypatch):
    def grouped_run(plan, graph, frames, warmup, *args, **kwargs) -> RunReport:
        return RunReport("plan", 20, 2, 500.0, latency_stats([2e-3] * 18),
                         notes={"per_element_fps": {"cpu1": 100.0, "gpu0": 400.0}})

    patch_everywhere(monkeypatch, api, "run_plan", grouped_run)
    code, out, err = hetflow("run", plan_file)
    assert code == 0, err
    assert "plan frames/s delivered by: gpu0 400.0, cpu1 100.0" in out


def test_frames_on_a_clock_say_whether_the_plan_kept_up(hetflow, plan_file):
    args = ("run", plan_file, "--frames", "20", "--warmup", "2", "--rate", "100")
    code, out, err = hetflow(*args, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["notes"]["arrival_rate"] == 100 and report["checked_frames"] == 8
    code, out, err = hetflow(*args)
    assert code == 0, err
    assert "plan: frames arrived at 100.0 frames/s" in out


def test_a_plan_predicted_at_the_runs_rate_sets_its_p50_beside_the_measured(hetflow, plan_file):
    plan = json.loads(plan_file.read_text())
    plan["predicted"]["at_rate"] = {"rate": 100.0, "batch_wait": {}, "latency_p50": 0.5,
                                    "latency_first": 0.5}
    plan_file.write_text(json.dumps(plan))
    code, out, err = hetflow("run", plan_file, "--frames", "20", "--warmup", "2", "--rate", "100")
    assert code == 0, err
    assert "predicted at that rate: p50 500.00 ms, measured" in out
    # at another rate than the plan was predicted at, no such line
    code, out, err = hetflow("run", plan_file, "--frames", "20", "--warmup", "2", "--rate", "50")
    assert code == 0 and "predicted at that rate" not in out


def test_a_rate_of_no_frames_exits_two(hetflow, plan_file):
    code, out, err = hetflow("run", plan_file, "--rate", "0")
    assert code == 2 and "--rate" in err and "Traceback" not in err


def test_the_run_reports_its_energy_and_says_which_counters_exist(hetflow, plan_file):
    """The test plan's CPU elements give no power_w, and a CI machine has no RAPL it may read:
    the method says so and the figures are null, never NaN."""
    code, out, err = hetflow("run", plan_file, "--frames", "20", "--warmup", "2", "--json")
    assert code == 0, err
    energy = json.loads(out)["energy"]
    assert set(energy["method"]) == {"cpu"}
    json.dumps(energy, allow_nan=False)
    if energy["method"]["cpu"] != "rapl":  # where RAPL is readable, the package is measured
        assert energy["method"]["cpu"].startswith("none (no RAPL")
        assert energy["joules_per_frame"] is None
    code, out, err = hetflow("run", plan_file, "--frames", "20", "--warmup", "2")
    assert code == 0, err
    assert "plan energy: " in out and "[cpu: " in out


def test_schedule_prints_each_elements_actions_and_runs_nothing(hetflow, plan_file, monkeypatch):
    def no_run(*args, **kwargs):
        raise AssertionError("--schedule must not run the plan")

    patch_everywhere(monkeypatch, api, "run_plan", no_run)
    code, out, err = hetflow("run", plan_file, "--schedule")
    assert code == 0, err
    lines = out.splitlines()
    assert "cpu0 (stage cpu0, member 0, dynamic dispatch):" in lines
    assert "cpu1 (stage cpu1, member 0, dynamic dispatch):" in lines
    cpu0, cpu1 = out.split("cpu1 (stage cpu1")
    assert "    fire phase 0 of frame 0 (loads " in cpu0 and "    send " in cpu0
    assert cpu1.index("    recv ") < cpu1.index("    fire phase 0 of frame 0")
    assert "  round 2:" in cpu1 and "  round 3:" not in cpu1
