"""Energy counter arithmetic on recorded counter sequences (wrap-around, a window too short for
the counter, a reset, several packages), RAPL discovery on a fake powercap tree, NVML discovery
without NVML or with a fake one, and the sampler with fake meters."""
import sys
import time
import types
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetflow.backends.energy import (CounterError, CounterTrace, EnergySampler, NvmlMeter,
                                     nvml_device_id, nvml_meters, rapl_meters, unwrap)

# a RAPL package counter read every 0.5 s near its wrap (max_energy_range_uj of a Xeon)
RANGE = 262143328850.0
RAPL_TIMES = [0.0, 0.5, 1.0, 1.5, 2.0]
RAPL_RAW = [RANGE - 100e6, RANGE - 50e6, 0.0 + 0.0, 50e6, 100e6]  # 100 W, wraps at t=1.0


def rapl_trace(times=RAPL_TIMES, raw=RAPL_RAW, wrap=RANGE) -> CounterTrace:
    return CounterTrace("cpu package-0", "rapl", 1e-6, wrap, 0.1, list(times), list(raw))


def test_a_wrap_around_adds_the_range():
    assert unwrap(RAPL_RAW, RANGE) == [0.0, 50e6, 100e6, 150e6, 200e6]
    w = rapl_trace().window(0.0, 2.0)
    assert w.joules == pytest.approx(200.0) and w.watts == pytest.approx(100.0)
    assert w.reliable and w.method == "rapl"


def test_a_window_between_readings_is_interpolated():
    # steady 100 W: any window inside the readings measures 100 W
    w = rapl_trace().window(0.25, 1.75)
    assert w.joules == pytest.approx(150.0) and w.watts == pytest.approx(100.0)


def test_a_counter_that_goes_back_without_a_range_was_reset():
    with pytest.raises(CounterError):
        unwrap([5.0, 7.0, 3.0], None)
    w = CounterTrace("gpu0", "nvml", 1e-3, None, 1.0, [0.0, 1.0, 2.0], [5e3, 9e3, 1e3]
                     ).window(0.0, 2.0)
    assert w.joules is None and not w.reliable and "went back" in w.note


def test_a_window_shorter_than_the_counter_resolves_is_flagged():
    # NVML, mJ: 300 W read every 0.1 s
    times = [i * 0.1 for i in range(11)]
    raw = [1e9 + 30e3 * i for i in range(11)]
    short = CounterTrace("gpu0", "nvml", 1e-3, None, 1.0, times, raw).window(0.2, 0.6)
    assert short.watts == pytest.approx(300.0) and not short.reliable
    assert "shorter than the 1 s that nvml resolves" in short.note
    whole = CounterTrace("gpu0", "nvml", 1e-3, None, 1.0, times, raw).window(0.0, 1.0)
    assert whole.reliable and whole.joules == pytest.approx(300.0)


def test_a_counter_that_did_not_advance_is_flagged():
    w = CounterTrace("gpu0", "nvml", 1e-3, None, 1.0, [0.0, 1.0, 2.0], [7.0] * 3).window(0, 2)
    assert w.joules == 0.0 and not w.reliable and "did not advance" in w.note


def test_a_window_outside_the_readings_has_no_figure():
    for t0, t1 in ((-1.0, 1.0), (1.0, 3.0), (1.0, 1.0)):
        w = rapl_trace().window(t0, t1)
        assert w.joules is None and w.watts is None and not w.reliable
    assert CounterTrace("gpu0", "nvml", 1e-3, None, 1.0).window(0, 1).joules is None


@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=30), st.floats(1e3, 1e7))
def test_unwrapped_counts_are_the_sum_of_the_steps(steps, start):
    # a counter of range 4e6 fed `steps` (each below the range): unwrap recovers their sum
    wrap = 4e6
    raw, c = [start % wrap], start % wrap
    for s in steps:
        c = (c + s) % wrap
        raw.append(c)
    got = unwrap(raw, wrap)
    assert got[-1] == pytest.approx(sum(steps), abs=1e-3)
    assert all(b >= a for a, b in zip(got, got[1:]))


# ---- RAPL on a fake powercap tree -----------------------------------------------------------

def zone(root, name, label, energy, rng=RANGE):
    z = root / name
    z.mkdir(parents=True)
    (z / "name").write_text(label + "\n")
    (z / "energy_uj").write_text(f"{int(energy)}\n")
    (z / "max_energy_range_uj").write_text(f"{int(rng)}\n")
    return z


def test_rapl_meters_read_each_package_and_skip_sub_zones_and_psys(tmp_path):
    zone(tmp_path, "intel-rapl:0", "package-0", 1000)
    zone(tmp_path, "intel-rapl:1", "package-1", 2000)
    zone(tmp_path, "intel-rapl:0:0", "core", 5)  # inside package 0
    zone(tmp_path, "intel-rapl:2", "psys", 9000)  # the whole platform
    meters, why = rapl_meters(tmp_path)
    assert why is None
    assert [m.name for m in meters] == ["cpu package-0", "cpu package-1"]
    assert [m.read() for m in meters] == [1000.0, 2000.0] and meters[0].wrap == RANGE


def test_several_packages_wrap_each_on_their_own(tmp_path):
    z0 = zone(tmp_path, "intel-rapl:0", "package-0", RANGE - 10e6)
    z1 = zone(tmp_path, "intel-rapl:1", "package-1", 0)
    meters, _ = rapl_meters(tmp_path)
    clock = iter([0.0] * 4 + [1.0] * 4)  # two reads of the clock around each counter's
    s = EnergySampler(meters, clock=lambda: next(clock))
    s.sample()
    (z0 / "energy_uj").write_text(f"{int(20e6)}\n")  # wrapped: 30 J
    (z1 / "energy_uj").write_text(f"{int(50e6)}\n")  # 50 J
    s.sample()
    got = {w.name: w.joules for w in s.window(0.0, 1.0)}
    assert got == {"cpu package-0": pytest.approx(30.0), "cpu package-1": pytest.approx(50.0)}


def test_no_powercap_says_so(tmp_path):
    meters, why = rapl_meters(tmp_path / "absent")
    assert meters == [] and "no RAPL" in why and "a VM" in why


def test_an_unreadable_counter_says_permission_denied(tmp_path, monkeypatch):
    zone(tmp_path, "intel-rapl:0", "package-0", 1000)
    real = type(tmp_path).read_text

    def read_text(self, *a, **k):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **k)

    monkeypatch.setattr(type(tmp_path), "read_text", read_text)
    meters, why = rapl_meters(tmp_path)
    assert meters == [] and "permission denied" in why


# ---- NVML -----------------------------------------------------------------------------------

def test_cuda_visible_devices_renumber_the_gpus():
    assert nvml_device_id(1, None) == 1
    assert nvml_device_id(1, "2,3") == 3
    assert nvml_device_id(0, "GPU-abc, 1") == "GPU-abc"
    with pytest.raises(IndexError):
        nvml_device_id(2, "0,1")


def test_without_pynvml_each_gpu_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    meters, missing = nvml_meters({"gpu0": 0})
    assert meters == [] and "pynvml is not installed" in missing["gpu0"]


@dataclass
class FakeNvml:
    """pynvml's calls that the meters use, over devices {index: millijoules}; a device of
    None does not support the energy counter (older than Volta)."""
    energy: dict
    fail_init: bool = False
    calls: list = field(default_factory=list)

    def module(self):
        m = types.ModuleType("pynvml")

        class NVMLError(Exception):
            pass

        m.NVMLError = NVMLError

        def init():
            if self.fail_init:
                raise NVMLError("Driver Not Loaded")

        def by_index(i):
            if i not in self.energy:
                raise NVMLError("Invalid Argument")
            return i

        def total(h):
            if self.energy[h] is None:
                raise NVMLError("Not Supported")
            return self.energy[h]

        m.nvmlInit, m.nvmlDeviceGetHandleByIndex = init, by_index
        m.nvmlDeviceGetTotalEnergyConsumption = total
        return m


def test_nvml_meters_read_supported_gpus_and_say_why_for_others(monkeypatch):
    fake = FakeNvml({0: 123456, 1: None})
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    meters, missing = nvml_meters({"gpu0": 0, "gpu1": 1, "gpu7": 7})
    assert [m.name for m in meters] == ["gpu0"] and isinstance(meters[0], NvmlMeter)
    assert meters[0].read() == 123456.0 and meters[0].unit_j == 1e-3
    assert "Not Supported" in missing["gpu1"] and "Invalid Argument" in missing["gpu7"]


def test_an_nvml_that_does_not_start_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml({}, fail_init=True).module())
    meters, missing = nvml_meters({"gpu0": 0})
    assert meters == [] and missing == {"gpu0": "no NVML: Driver Not Loaded"}


# ---- the sampler ----------------------------------------------------------------------------

@dataclass
class RampMeter:
    """A counter that reads `watts` joules per second of a fake clock."""
    clock: list
    watts: float
    name: str = "gpu0"
    method: str = "nvml"
    unit_j: float = 1.0
    wrap: float | None = None
    min_window_s: float = 1.0

    def read(self) -> float:
        return self.watts * self.clock[0]


def test_the_sampler_reads_at_both_ends():
    now = [10.0]
    s = EnergySampler([RampMeter(now, 250.0)], period=3600.0, clock=lambda: now[0])
    with s:
        now[0] = 13.0
    assert s.traces[0].times == [10.0, 13.0]
    (w,) = s.window(11.0, 12.5)
    assert w.watts == pytest.approx(250.0) and w.reliable
    (whole,) = s.span()
    assert whole.seconds == 3.0 and whole.joules == pytest.approx(750.0)


def test_the_sampler_reads_every_period_between():
    s = EnergySampler([RampMeter([1.0], 1.0)], period=0.01)
    with s:
        time.sleep(0.2)
    times = s.traces[0].times
    assert len(times) >= 5 and times == sorted(times) and s._thread is None


def test_a_sampler_without_meters_starts_no_thread():
    s = EnergySampler([]).start()
    assert s._thread is None and s.window(0.0, 1.0) == []
    s.stop()


# ---- NVML's counter moves in steps ----------------------------------------------------------

STEP_S = 0.1  # an H100's NVML energy counter advances every 100 ms, idle and under load


def stepped_nvml(watts: float, reads: list[float]) -> CounterTrace:
    """NVML read at `reads` (s) while the GPU draws `watts`: each reading is the energy up to
    the counter's last step (mJ)."""
    raw = [watts * 1e3 * STEP_S * int(t / STEP_S) for t in reads]
    return CounterTrace("gpu0", "nvml", 1e-3, None, 1.0, list(reads), raw)


@given(st.lists(st.floats(0.0, 0.099), min_size=60, max_size=60),
       st.floats(0.3, 3.0), st.floats(0.0, 1.5))
def test_a_stepped_counter_is_off_by_at_most_a_step_at_each_end(jitter, seconds, start):
    # read about every 100 ms at jittered instants, as the sampler does
    reads = sorted(i * STEP_S + j for i, j in enumerate(jitter))
    trace = stepped_nvml(700.0, reads)
    t0 = reads[0] + start
    w = trace.window(t0, t0 + seconds)
    assert w.joules is not None
    # a reading lags the true energy by up to one step (70 J), so does the interpolation
    # between readings: the two ends differ by less than a step
    assert abs(w.joules - 700.0 * seconds) <= 700.0 * STEP_S + 1e-6
    assert w.reliable == (seconds >= 1.0)
    if not w.reliable:
        assert "shorter than the 1 s that nvml resolves" in w.note


def test_a_window_across_a_wrap_is_interpolated_at_both_ends():
    # the RAPL recording above wraps between the readings at 0.5 s and 1.0 s: 100 W throughout
    w = rapl_trace().window(0.75, 1.25)
    assert w.joules == pytest.approx(50.0) and w.watts == pytest.approx(100.0) and w.reliable
