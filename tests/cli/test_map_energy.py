"""`hetflow map --prefer energy --min-rate R`: the front's design with the least predicted energy
per frame among those predicted at R frames/s or more; a floor no design reaches, an element
without any power figure, or pilots asked to choose by energy are one line and exit 2."""
import csv
import json

import onnx
import pytest

from hetflow.model.synthetic import random_cnn_model
from tests.cli.conftest import one_line_exit_2

PLATFORM = """name: tiny-soc
clusters:
  - name: big
    cores: [0, 1, 2]
{cpu_power}    peak_gflops_per_core: 10.0
    mem_gbps: 10.0
gpus:
  - index: 0
    name: tiny gpu
    driver_core: 2
{gpu_power}    peak_gflops: 200.0
    mem_gbps: 30.0
    backend: none
comm:
  cpu->cpu: {{a: 1.0e-5, b: 1.0e-10}}
  cpu->gpu: {{a: 2.0e-4, b: 1.0e-10}}
  gpu->cpu: {{a: 2.0e-4, b: 1.0e-10}}
"""
SEARCH = ["-s", "nsga2", "-O", "pop_size=12", "-O", "generations=4"]


@pytest.fixture
def inputs(hetflow, tmp_path, monkeypatch):
    """(model, platform YAML, estimated profile) of a tiny CNN on three cores (one drives the GPU) and a GPU with
    nominal powers."""
    monkeypatch.setenv("HETFLOW_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "tiny.onnx"
    onnx.save(random_cnn_model(6, seed=4, channels=8, size=16), model)
    plat = tmp_path / "soc.yaml"
    plat.write_text(PLATFORM.format(cpu_power="    power_w_per_core: 1.0\n",
                                    gpu_power="    power_w: 4.0\n"))
    prof = tmp_path / "p.json"
    code, _, err = hetflow("profile", model, "-p", plat, "--estimate", "-o", prof)
    assert code == 0, err
    return model, plat, prof


def test_the_least_energy_design_at_the_floor_or_above_is_planned(hetflow, inputs, tmp_path):
    model, plat, prof = inputs
    front = tmp_path / "front.csv"
    code, _, err = hetflow("map", model, "--profile", prof, "-p", plat, *SEARCH,
                           "--pareto", front)
    assert code == 0, err
    rows = list(csv.DictReader(front.open()))
    assert all(r["energy_j_per_frame"] and r["energy_method"].startswith("modelled")
               for r in rows)
    rates = sorted(float(r["throughput_fps"]) for r in rows)
    floor = rates[len(rates) // 2]
    code, out, err = hetflow("map", model, "--profile", prof, "-p", plat, *SEARCH,
                             "--prefer", "energy", "--min-rate", floor, "--json")
    assert code == 0, err
    plan = json.loads(out)
    got = plan["predicted"]
    assert got["throughput"] >= floor
    least = min(float(r["energy_j_per_frame"]) for r in rows
                if float(r["throughput_fps"]) >= floor)
    assert got["energy_per_frame"] == pytest.approx(least, rel=1e-9)
    assert plan["search"]["prefer"] == "energy" and plan["search"]["min_rate"] == floor
    assert got["energy_method"].startswith("modelled")


def test_a_floor_no_design_reaches_is_one_line(hetflow, inputs):
    model, plat, prof = inputs
    one_line_exit_2(hetflow("map", model, "--profile", prof, "-p", plat, *SEARCH,
                            "--prefer", "energy", "--min-rate", "1e9"),
                    "--min-rate 1e+09: no design on the front is predicted that fast")
    one_line_exit_2(hetflow("map", model, "--profile", prof, "-p", plat, "-s", "pipeline",
                            "--min-rate", "1e9"),
                    "--min-rate 1e+09: the plan found is predicted at")


def test_an_element_without_any_power_figure_is_named(hetflow, inputs, tmp_path):
    model, _, _ = inputs
    bare = tmp_path / "bare.yaml"
    bare.write_text(PLATFORM.format(cpu_power="", gpu_power=""))
    prof = tmp_path / "bare.json"
    assert hetflow("profile", model, "-p", bare, "--estimate", "-o", prof)[0] == 0
    one_line_exit_2(hetflow("map", model, "--profile", prof, "-p", bare, *SEARCH,
                            "--prefer", "energy"),
                    "has no power figure: no energy counter (the profile measured no power) "
                    "and its platform gives it no power_w")


def test_pilots_do_not_choose_by_energy(hetflow, inputs):
    model, plat, prof = inputs
    one_line_exit_2(hetflow("map", model, "--profile", prof, "-p", plat, *SEARCH,
                            "--prefer", "energy", "--pilots", "2"), "--prefer energy")


def test_the_run_line_puts_the_plans_prediction_beside_the_measurement():
    from hetflow.cli.run_cmd import predicted_energy
    from hetflow.runtime.report import RunReport, latency_stats

    r = RunReport("plan", 100, 10, 50.0, latency_stats([1e-3]),
                  predicted={"energy_per_frame": 0.5, "energy_method": "nvml"},
                  energy={"joules_per_frame": 0.55})
    assert predicted_energy(r) == "; predicted 0.5 J/frame (nvml): measured 1.10x it"
    r.energy = {"joules_per_frame": None}
    assert predicted_energy(r) == "; predicted 0.5 J/frame (nvml)"
    r.predicted = {"throughput": 40.0}
    assert predicted_energy(r) == ""


def test_front_plans_are_the_fronts_designs_each_a_plan_to_run(hetflow, inputs, tmp_path):
    """`--front-plans DIR` writes a plan of every design on the front, fastest first, each
    with its predicted throughput, latency and energy per frame (what a run then sets measured
    figures beside); a DIR that is a file is one line and exit 2."""
    from hetflow.plan.plan import Plan

    model, plat, prof = inputs
    front, folder = tmp_path / "front.csv", tmp_path / "front"
    code, out, err = hetflow("map", model, "--profile", prof, "-p", plat, *SEARCH,
                             "--pareto", front, "--front-plans", folder)
    assert code == 0, err
    rows = list(csv.DictReader(front.open()))
    plans = [Plan.load(folder / f"tiny.front{i}.plan.json") for i in range(len(rows))]
    assert sorted(folder.iterdir()) == sorted(folder / f"tiny.front{i}.plan.json"
                                              for i in range(len(rows)))
    rates = [p.predicted["throughput"] for p in plans]
    assert rates == sorted(rates, reverse=True)
    for p in plans:
        assert p.predicted["energy_per_frame"] > 0
        assert p.predicted["energy_method"].startswith("modelled")
    # the front's designs themselves: the CSV's figures, row by row
    for p, r in zip(plans, rows):
        assert p.predicted["throughput"] == pytest.approx(float(r["throughput_fps"]), rel=1e-6)
        assert p.predicted["energy_per_frame"] == pytest.approx(
            float(r["energy_j_per_frame"]), rel=1e-6)
    one_line_exit_2(hetflow("map", model, "--profile", prof, "-p", plat, *SEARCH,
                            "--front-plans", front), str(front))


def test_a_plan_predicts_its_latency_at_the_rate_a_stream_arrives_at(hetflow, inputs, tmp_path):
    model, plat, prof = inputs
    out = tmp_path / "plan.json"
    code, text, err = hetflow("map", model, "--profile", prof, "-p", plat, "-s", "single",
                              "--rate", "5", "--batch-wait-ms", "2", "-o", out)
    assert code == 0, err
    plan = json.loads(out.read_text())
    at = plan["predicted"]["at_rate"]
    # far below its rate, a frame of a plan without batches takes its time alone
    assert at["rate"] == 5 and at["batch_wait"] == {}
    assert at["latency_p50"] == pytest.approx(plan["predicted"]["latency_isolated"], rel=1e-6)
    assert "at 5 frames/s on a clock" in text and "batches no element" in text

