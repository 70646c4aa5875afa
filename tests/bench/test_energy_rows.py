"""Every bench row carries its run's energy per frame, mean watts and how they were read; the
report plots throughput against energy per frame for plans and baselines."""
import os

import onnx
import pytest

from hetflow.bench.html import energy_figure, rows_table
from hetflow.bench.rows import run_row
from hetflow.model.reader import load_model
from hetflow.model.synthetic import random_cnn_model
from hetflow.platform.spec import ProcessingElement
from hetflow.runtime.baselines import measure_parallel
from hetflow.runtime.energy import with_energy
from hetflow.runtime.inputs import random_source
from hetflow.runtime.report import RunReport, latency_stats

CORE = sorted(os.sched_getaffinity(0))[0]


def test_a_baseline_row_has_a_modelled_figure_where_no_counter_is_read(tmp_path):
    onnx.save(random_cnn_model(4, seed=2, channels=4, size=8), tmp_path / "m.onnx")
    graph = load_model(tmp_path / "m.onnx")
    cpu = ProcessingElement("cpu0", "cpu", (CORE,), power_w=7.0)
    r = with_energy({"cpu0": cpu}, lambda: measure_parallel(
        graph, [cpu], random_source(graph), warmup=2, seconds=0.3), powercap=tmp_path / "none")
    row = run_row("parallel copies", "baseline", r)
    assert row["energy_method"].startswith("cpu: modelled (no RAPL") and not row["energy_measured"]
    # modelled: its power_w over its busy share of the steady window
    assert row["watts"] == pytest.approx(7.0 * r.utilisation["cpu0"], rel=1e-6)
    assert row["joules_per_frame"] == pytest.approx(row["watts"] / r.throughput, rel=1e-6)


def test_a_run_without_power_w_or_counter_has_no_figure_and_says_why(tmp_path):
    cpu = ProcessingElement("cpu0", "cpu", (CORE,))
    r = with_energy({"cpu0": cpu}, lambda: RunReport(
        "single", 20, 2, 50.0, latency_stats([1e-3]), {"cpu0": 1.0},
        notes={"window_s": 1.0}, window_at=(0.0, 1.0)), powercap=tmp_path / "none")
    row = run_row("peak single (cpu0)", "baseline", r)
    assert row["joules_per_frame"] is None and row["watts"] is None
    assert "no power_w for cpu0" in row["energy_method"]


def rows():
    def row(name, kind, fps, jpf, predicted=None, measured=True):
        return {"name": name, "kind": kind, "throughput": fps, "latency_p50": 0.01,
                "latency_p99": 0.02, "predicted_throughput": predicted and predicted[0],
                "predicted_joules_per_frame": predicted and predicted[1],
                "joules_per_frame": jpf, "watts": jpf and jpf * fps,
                "energy_method": "gpu0: nvml; cpu: rapl", "energy_measured": measured}

    return [row("peak single (gpu0)", "baseline", 900.0, 0.31),
            row("parallel copies", "baseline", 1000.0, 0.45, measured=False),
            row("hetflow nsga2", "plan", 1100.0, 0.28, predicted=(1150.0, 0.26))]


def test_the_report_plots_throughput_against_energy_and_tabulates_it():
    fig = energy_figure(rows())
    ax = fig.axes[0]
    assert ax.get_xlabel().startswith("energy J/frame") and ax.get_ylabel().startswith("frames/s")
    assert {t.get_text() for t in ax.texts} == {r["name"] for r in rows()}
    twins = rows() + [{**rows()[2], "name": "hetflow single"}]  # one run, two plan kinds
    assert "hetflow nsga2, hetflow single" in {t.get_text() for t in energy_figure(twins).axes[0].texts}
    table = rows_table(rows())
    assert "<th>J/frame</th>" in table and "<th>predicted J/frame</th>" in table
    assert ">0.28<" in table and ">0.26<" in table
    assert energy_figure([{**r, "joules_per_frame": None} for r in rows()]) is None
