"""A run's energy figure: measured parts from counter windows, modelled parts from nominal
watts with the reason beside them, no NaN, and which counters a machine has."""
import json
import sys

import pytest

from hetflow.backends.energy import CounterTrace, WindowEnergy
from hetflow.platform.spec import ProcessingElement
from hetflow.runtime.energy import energy_line, local_meters, part_of, run_energy, start_energy
from hetflow.runtime.report import RunReport, latency_stats

ELEMENTS = {
    "cpu0": ProcessingElement("cpu0", "cpu", (0, 1), power_w=10.0),
    "cpu1": ProcessingElement("cpu1", "cpu", (2, 3), power_w=10.0),
    "gpu0": ProcessingElement("gpu0", "gpu", (4,), device_index=0, power_w=300.0),
}


def report(fps=100.0, window=2.0, util=None) -> RunReport:
    return RunReport("plan", 250, 50, fps, latency_stats([1e-3] * 10),
                     util if util is not None else {"cpu0": 0.5, "cpu1": 0.25, "gpu0": 0.8},
                     notes={"window_s": window}, window_at=(5.0, 5.0 + window))


def test_each_element_counts_in_the_part_of_the_machine_its_counter_sees():
    assert [part_of(e) for e in ELEMENTS.values()] == ["cpu", "cpu", "gpu0"]
    assert part_of(ProcessingElement("npu", "accel", ())) == "npu"


def test_a_measured_gpu_beside_modelled_cpus():
    gpu = WindowEnergy("gpu0", "nvml", 2.0, 400.0, True)
    e = run_energy(report(), ELEMENTS, {"gpu0": [gpu]}, {"cpu": "no RAPL: a VM"})
    assert e["method"] == {"gpu0": "nvml", "cpu": "modelled (no RAPL: a VM)"}
    assert e["parts"]["gpu0"]["watts"] == pytest.approx(200.0)
    assert e["parts"]["gpu0"]["joules_per_frame"] == pytest.approx(2.0)
    # modelled: 10 W x 0.5 + 10 W x 0.25 busy over the 2 s window
    assert e["parts"]["cpu"]["joules"] == pytest.approx(15.0)
    assert e["joules"] == pytest.approx(415.0) and e["watts"] == pytest.approx(207.5)
    assert e["joules_per_frame"] == pytest.approx(2.075) and e["measured"] is False
    line = energy_line(e)
    assert "2.075 J/frame, 207.5 W over the 2.00 s window" in line
    assert "[gpu0: nvml; cpu: modelled (no RAPL: a VM)]" in line


def test_several_packages_sum_into_the_cpu_part():
    pk = [WindowEnergy("cpu package-0", "rapl", 2.0, 60.0, True),
          WindowEnergy("cpu package-1", "rapl", 2.0, 40.0, True)]
    gpu = WindowEnergy("gpu0", "nvml", 2.0, 400.0, True)
    e = run_energy(report(), ELEMENTS, {"cpu": pk, "gpu0": [gpu]}, {})
    assert e["parts"]["cpu"]["joules"] == pytest.approx(100.0) and e["measured"] is True
    assert e["joules_per_frame"] == pytest.approx(2.5)


def test_a_short_window_is_flagged_in_the_figure_and_the_line():
    gpu = WindowEnergy("gpu0", "nvml", 0.4, 80.0, False,
                       "a 0.40 s window is shorter than the 1 s that nvml resolves")
    e = run_energy(report(window=0.4), ELEMENTS, {"gpu0": [gpu]}, {"cpu": "no RAPL"})
    assert e["parts"]["gpu0"]["reliable"] is False and e["measured"] is False
    assert "(unreliable: gpu0: a 0.40 s window is shorter" in energy_line(e)


def test_without_power_w_or_a_window_there_is_no_figure_and_no_nan():
    bare = {k: ProcessingElement(k, "cpu", (0,)) for k in ("cpu0", "cpu1")}
    e = run_energy(report(), bare, {}, {"cpu": "no RAPL: a VM"})
    assert e["joules"] is None and e["joules_per_frame"] is None
    assert e["method"]["cpu"] == "none (no RAPL: a VM; no power_w for cpu0, cpu1)"
    assert energy_line(e).startswith("energy: no figure [cpu: none (no RAPL")
    nan = run_energy(report(fps=float("nan"), window=0.0), ELEMENTS,
                     {"gpu0": [WindowEnergy("gpu0", "nvml", 0.0, None, False, "no cover")]},
                     {"cpu": "no RAPL"})
    json.dumps(nan, allow_nan=False)  # strict JSON: every missing figure is null
    assert nan["window_s"] is None and nan["parts"]["gpu0"]["joules"] is None


def test_local_meters_say_which_counters_this_machine_has(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    z = tmp_path / "intel-rapl:0"
    z.mkdir()
    (z / "name").write_text("package-0\n")
    (z / "energy_uj").write_text("1000\n")
    (z / "max_energy_range_uj").write_text("262143328850\n")
    meters, missing = local_meters(ELEMENTS, tmp_path)
    assert [m.name for m in meters["cpu"]] == ["cpu package-0"]
    assert set(missing) == {"gpu0"} and "pynvml is not installed" in missing["gpu0"]
    meters, missing = local_meters(ELEMENTS, tmp_path / "absent")
    assert meters == {} and "no RAPL" in missing["cpu"]


def test_a_recorded_run_measures_its_window(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    cpus = {k: ELEMENTS[k] for k in ("cpu0", "cpu1")}
    z = tmp_path / "intel-rapl:0"
    z.mkdir()
    (z / "name").write_text("package-0\n")
    (z / "energy_uj").write_text("0\n")
    rec = start_energy(cpus, powercap=tmp_path)
    rec.sampler.stop()
    # replace what the live sampler read by a recorded 50 W sequence around the window
    rec.sampler.traces = [CounterTrace("cpu package-0", "rapl", 1e-6, None, 0.1,
                                       [4.0, 6.0, 8.0], [0.0, 100e6, 200e6])]
    e = rec.finish(report(window=2.0))  # the window is 5 s to 7 s
    assert e["method"] == {"cpu": "rapl"} and e["watts"] == pytest.approx(50.0)
    assert e["joules_per_frame"] == pytest.approx(0.5) and e["measured"] is True


def test_on_other_nodes_every_part_is_modelled():
    rec = start_energy(ELEMENTS, local=False)
    e = rec.finish(report())
    assert all(m.startswith("modelled (the elements may run on other nodes")
               for m in e["method"].values())
    assert rec.sampler._thread is None


def test_run_plan_measures_a_gpu_through_nvml_over_its_window(monkeypatch, tmp_path):
    """The whole path: a plan on a (fake) GPU and a CPU core, an NVML whose counter draws a
    steady 250 W, no RAPL: the run's report has the GPU measured, the CPU without a figure."""
    import time
    import types

    import fake_gpu
    import hetflow.runtime.energy as energy_mod
    from hetflow.runtime.api import run_plan
    from test_engine_lanes import GRAPHS, laned_plan

    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = type("NVMLError", (Exception,), {})
    nvml.nvmlInit = lambda: None
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetTotalEnergyConsumption = lambda h: int(250e3 * time.perf_counter())
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(energy_mod, "POWERCAP", tmp_path / "absent")
    graph = GRAPHS[0]
    names = [l.name for l in graph.layers]
    plan = laned_plan(graph, {n: "gpu0" if i < 5 else "cpu0" for i, n in enumerate(names)}, {})
    fake_gpu.reset()
    r = run_plan(plan, graph, frames=40, warmup=4, check="none")
    e = r.energy
    assert e["method"]["gpu0"] == "nvml" and e["method"]["cpu"].startswith("none (no RAPL")
    gpu = e["parts"]["gpu0"]
    assert gpu["watts"] == pytest.approx(250.0, rel=0.01)  # the counter's mJ steps: 1 mJ
    assert gpu["joules_per_frame"] == pytest.approx(250.0 / r.throughput, rel=0.01)
    assert e["window_s"] == pytest.approx(r.notes["window_s"])
    json.dumps(r.to_dict()["energy"], allow_nan=False)
