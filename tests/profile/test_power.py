"""The profile's power table: idle power per part and busy power per element shape, read from
counters over windows (here fake counters on the real clock, whose draw the fake runs set), a
CPU shape's rise shared among its copies, parts without a counter listed with why and nothing
run for them; and the table's arithmetic on recorded windows."""
from __future__ import annotations

import threading
import time

import pytest

from hetflow.backends.energy import WindowEnergy
from hetflow.mapping.energy import element_powers, frame_energy
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform import load_platform
from hetflow.platform.spec import ProcessingElement
from hetflow.profile import Profile
from hetflow.profile import power as power_mod
from hetflow.profile.power import disjoint, gpu_settings, measure_power, part_figures, shared_out
from hetflow.runtime.report import RunReport, latency_stats

GPU = ProcessingElement("gpu0", "gpu", (3,), device_index=0, model="gpu")
CPUS = [ProcessingElement(f"cpu{i}", "cpu", (i,), cluster="c") for i in range(2)]
MARGIN = 0.3  # seconds a fake run holds its draw before and after its window


class Draw:
    """A part's counter on the real clock: joules = the integral of the watts it was set to."""

    def __init__(self, name: str, method: str, watts: float):
        self.name, self.method, self.unit_j, self.wrap, self.min_window_s = name, method, 1.0, None, 0.1
        self.lock = threading.Lock()
        self.since, self.joules, self.watts = time.perf_counter(), 0.0, watts

    def read(self) -> float:
        with self.lock:
            now = time.perf_counter()
            return self.joules + self.watts * (now - self.since)

    def add(self, watts: float) -> None:
        with self.lock:
            now = time.perf_counter()
            self.joules += self.watts * (now - self.since)
            self.since, self.watts = now, self.watts + watts


def fake_machine(monkeypatch, gpu_rise: dict[int, float]):
    """The GPU idles at 60 W and rises by gpu_rise[lanes] (its driving core adds 5 W to the
    package); the package idles at 20 W and each busy core adds 10 W."""
    gpu, cpu = Draw("gpu0", "nvml", 60.0), Draw("cpu package-0", "rapl", 20.0)
    runs = []
    monkeypatch.setattr(power_mod, "local_meters",
                        lambda elements, powercap=None: ({"gpu0": [gpu], "cpu": [cpu]}, {}))

    def run(graph, copies, source, warmup, seconds, name, lanes, batch):
        rises = [(gpu, gpu_rise[lanes[e.name]]) if e.kind == "gpu" else (cpu, 10.0)
                 for e in copies] + [(cpu, 5.0) for e in copies if e.kind == "gpu"]
        runs.append((name, len(copies), dict(lanes)))
        for meter, w in rises:
            meter.add(w)
        time.sleep(MARGIN)
        t0 = time.perf_counter()
        time.sleep(seconds)
        t1 = time.perf_counter()
        time.sleep(MARGIN)
        for meter, w in rises:
            meter.add(-w)
        return RunReport(name, 10, 2, 100.0, latency_stats([1e-3]),
                         {e.name: 1.0 for e in copies}, notes={"window_s": t1 - t0},
                         window_at=(t0, t1))

    monkeypatch.setattr(power_mod, "measure_parallel", run)
    return runs


def lane_profile() -> Profile:
    graph = random_cnn_graph(3, seed=0)
    prof = Profile(graph.name, graph.model_hash, "test", "h")
    prof.gpu_lanes["gpu0"] = {"1": {"alone": {"median": 0.010}},
                              "8": {"alone": {"median": 0.020}}}  # 100 and 400 frames/s
    return prof


def test_idle_and_busy_power_are_read_per_part_and_shared_among_copies(monkeypatch):
    runs = fake_machine(monkeypatch, {1: 140.0, 8: 340.0})
    graph = random_cnn_graph(3, seed=0)
    table = measure_power(graph, [GPU, *CPUS], lane_profile(), seconds=0.3)
    assert [(n, c, lanes) for n, c, lanes in runs] == [
        ("power of gpu0", 1, {"gpu0": 1}), ("power of gpu0", 1, {"gpu0": 8}),
        ("power of cpu0", 2, {"cpu0": 1, "cpu1": 1})]
    watts = pytest.approx
    assert table["idle"]["gpu0"]["watts"] == watts(60.0, rel=0.02)
    assert table["idle"]["cpu"]["watts"] == watts(20.0, rel=0.02)
    assert table["idle"]["gpu0"]["method"] == "nvml" and table["idle"]["cpu"]["method"] == "rapl"
    eight = table["busy"]["gpu0"]["1,8"]["parts"]
    assert eight["gpu0"]["watts"] == watts(400.0, rel=0.02)
    assert eight["cpu"]["watts"] == watts(25.0, rel=0.02)  # its driving core
    assert table["busy"]["gpu0"]["1,1"]["parts"]["gpu0"]["watts"] == watts(200.0, rel=0.02)
    for cpu in ("cpu0", "cpu1"):  # two copies drew 40 W: each one's share is 20 + 20 / 2
        entry = table["busy"][cpu]["1,1"]
        assert entry["copies"] == 2 and entry["parts"]["cpu"]["watts"] == watts(30.0, rel=0.02)
    # the cost model reads the table: the GPU alone at 8 lanes, busy half the time
    figures, unmeasured = element_powers(table, [GPU, *CPUS])
    assert unmeasured == {}
    assert frame_energy(figures, {"gpu0": 0.5}, 100.0, {"gpu0": 8}, {}) == \
        watts((60.0 + 0.5 * 340.0) / 100.0, rel=0.03)


def test_parts_without_a_counter_are_listed_and_nothing_is_run(monkeypatch):
    missing = {"cpu": "no RAPL: no /sys/class/powercap/intel-rapl:* (a VM?)",
               "gpu0": "no NVML: pynvml is not installed"}
    monkeypatch.setattr(power_mod, "local_meters", lambda elements, powercap=None: ({}, missing))

    def run(*a, **k):
        raise AssertionError("no busy window without a counter")

    monkeypatch.setattr(power_mod, "measure_parallel", run)
    table = measure_power(random_cnn_graph(3, seed=0), [GPU, *CPUS], lane_profile(), 0.3,
                          sleep=run)
    assert table == {"window_s": 0.3, "idle": {}, "busy": {}, "missing": missing}
    figures, unmeasured = element_powers(table, [*CPUS, GPU])
    assert figures == {} and unmeasured == {"cpu0": missing["cpu"], "cpu1": missing["cpu"],
                                            "gpu0": missing["gpu0"]}


def test_a_part_sums_its_packages_and_has_no_figure_if_one_has_none():
    part = {"cpu package-0": "cpu", "cpu package-1": "cpu", "gpu0": "gpu0"}
    windows = [WindowEnergy("cpu package-0", "rapl", 2.0, 60.0, True),
               WindowEnergy("cpu package-1", "rapl", 2.0, 40.0, True),
               WindowEnergy("gpu0", "nvml", 2.0, 0.8, False, "a 0.5 s window is shorter")]
    got = part_figures(windows, part)
    assert got["cpu"]["watts"] == pytest.approx(50.0) and got["cpu"]["reliable"]
    assert not got["gpu0"]["reliable"] and "shorter" in got["gpu0"]["note"]
    windows[1] = WindowEnergy("cpu package-1", "rapl", 2.0, None, False, "did not cover")
    assert part_figures(windows, part)["cpu"]["watts"] is None


def test_a_rise_is_shared_among_copies_and_an_unread_part_left_alone():
    idle = {"cpu": {"watts": 20.0}, "gpu0": {"watts": 60.0}}
    busy = {"cpu": {"watts": 50.0, "method": "rapl"}, "gpu0": {"watts": None, "method": "nvml"}}
    out = shared_out(busy, idle, 3)
    assert out["cpu"]["watts"] == pytest.approx(30.0) and out["gpu0"]["watts"] is None


def test_copies_take_disjoint_cores():
    els = [ProcessingElement("cpu0-1", "cpu", (0, 1)), ProcessingElement("cpu1-2", "cpu", (1, 2)),
           ProcessingElement("cpu2-3", "cpu", (2, 3))]
    assert [e.name for e in disjoint(els)] == ["cpu0-1", "cpu2-3"]


def test_a_gpu_is_read_at_one_lane_its_best_lanes_and_each_batch_at_its_best_lanes():
    prof = lane_profile()
    assert gpu_settings(prof, "gpu0") == [(1, 1), (1, 8)]
    prof.gpu_batches["gpu0"] = {"1,1": {"alone": {"median": 0.010}},
                                "8,2": {"alone": {"median": 0.032}},  # 500 frames/s
                                "8,4": {"alone": {"median": 0.040}},  # 800
                                "16,4": {"alone": {"median": 0.100}},  # 640
                                "16,1": {"alone": {"median": 0.040}},  # 400
                                "skipped": "memory"}
    # the best (b, k) first, then each other batch at its fastest lane count
    assert gpu_settings(prof, "gpu0") == [(1, 1), (1, 8), (8, 4), (16, 4)]
    assert gpu_settings(prof, "gpu1") == [(1, 1)]
    # under a time limit: the best (b, k) only, beside one lane and the best lanes
    assert gpu_settings(prof, "gpu0", every_batch=False) == [(1, 1), (1, 8), (8, 4)]


def test_the_power_table_survives_the_profile_file(tmp_path):
    graph, platform = random_cnn_graph(3, seed=1), load_platform("hikey970")
    prof = Profile(graph.name, graph.model_hash, platform.name, platform.platform_hash,
                   layer_times={"cpu0": {l.name: {"median": 1e-3} for l in graph.layers}},
                   power={"window_s": 2.0, "idle": {"cpu": {"watts": 20.0, "method": "rapl",
                                                            "seconds": 2.0, "reliable": True,
                                                            "note": ""}},
                          "busy": {}, "missing": {"gpu0": "no NVML"}})
    again = Profile.load(prof.save(tmp_path / "p.json"))
    assert again.power == prof.power


def test_the_profile_command_says_each_parts_idle_each_elements_busy_and_what_is_missing():
    from hetflow.cli.profile_cmd import power_lines, power_summary

    f = {"method": "nvml", "seconds": 2.0, "reliable": True, "note": ""}
    table = {"window_s": 2.0, "idle": {"gpu0": {**f, "watts": 61.25}},
             "busy": {"gpu0": {"1,8": {"busy_share": 1.0, "copies": 1,
                                       "parts": {"gpu0": {**f, "watts": 402.0}}}}},
             "missing": {"cpu": "no RAPL: a VM"}}
    assert power_lines(power_summary(table)) == [
        "idle power: gpu0 61.2 W (nvml)",
        "busy power of gpu0: b,k=1,8 gpu0 402.0 W",
        "power of cpu: no RAPL: a VM; the platform's power_w is used (modelled)"]
    assert power_lines(power_summary({})) == []
