"""Energy meters: cumulative energy counters of this machine, read over a measurement window.

A meter reads one counter (an NVIDIA GPU's total energy through NVML, a CPU package's RAPL
counter in powercap's sysfs). `EnergySampler` reads every meter when it starts, every `period`
seconds and when it stops, and `CounterTrace.window(t0, t1)` turns the recorded readings into
joules and mean watts over any window inside them: a run's steady window is known only once the
run is over, and RAPL counters wrap after a few minutes at full power (at 2^32 uJ after about
20 s at 200 W on some parts), so readings at the two ends alone would not do.

The arithmetic on readings is pure (`unwrap`, `CounterTrace.window`); only `NvmlMeter.read`,
`RaplMeter.read` and the discovery functions touch the hardware. Where no counter can be read,
the discovery functions say why, and the caller falls back to a model, labelled as such.
"""
from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Protocol, Sequence

POWERCAP = Path("/sys/class/powercap")
# NVML's energy counter advances in steps, every 100 ms on an H100 (idle and under load), and a
# window's ends fall between steps: on an H100 at a steady 700 W, consecutive windows read with
# a spread (stdev) of 10% at 0.5 s, 4.6% at 1 s, 0.1% at 2 s (read every 100 ms, linear
# between readings). Windows shorter than 1 s are marked unreliable.
NVML_MIN_WINDOW_S = 1.0
# RAPL counters update about every millisecond.
RAPL_MIN_WINDOW_S = 0.1
SAMPLE_PERIOD_S = 0.1


class EnergyMeter(Protocol):
    """One cumulative energy counter. `read()` returns its raw value in units of `unit_j` joules;
    a counter with `wrap` starts again from 0 once it reaches `wrap`."""

    name: str  # what it measures, e.g. "gpu0", "cpu package 0"
    method: str  # how: "nvml", "rapl"
    unit_j: float
    wrap: float | None
    min_window_s: float

    def read(self) -> float: ...


@dataclass(frozen=True)
class WindowEnergy:
    """Energy one counter measured over one window. `joules` is None when the readings do not
    cover the window; `reliable` is False for a window shorter than the counter resolves."""

    name: str
    method: str
    seconds: float
    joules: float | None
    reliable: bool
    note: str = ""

    @property
    def watts(self) -> float | None:
        if self.joules is None or self.seconds <= 0:
            return None
        return self.joules / self.seconds


class CounterError(ValueError):
    """Readings that cannot be a counter's: one that went back without a wrap-around range."""


def unwrap(raw: Sequence[float], wrap: float | None) -> list[float]:
    """Cumulative counts from a counter's raw readings, the first at 0. A reading below the one
    before means the counter passed `wrap` and started again from 0: it adds `wrap` (readings
    are taken often enough that it wraps at most once between two). A counter without `wrap`
    (NVML's, 64 bits of millijoules) that goes back was reset (driver reloaded): an error."""
    out = [0.0] if raw else []
    for prev, cur in zip(raw, raw[1:]):
        step = cur - prev
        if step < 0:
            if wrap is None:
                raise CounterError(f"the counter went back from {prev} to {cur}")
            step += wrap
        out.append(out[-1] + step)
    return out


@dataclass
class CounterTrace:
    """A meter's readings at the times (perf_counter seconds) they were taken."""

    name: str
    method: str
    unit_j: float
    wrap: float | None
    min_window_s: float
    times: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)

    @staticmethod
    def of(meter: EnergyMeter) -> "CounterTrace":
        return CounterTrace(meter.name, meter.method, meter.unit_j, meter.wrap,
                            meter.min_window_s)

    def window(self, t0: float, t1: float) -> WindowEnergy:
        """Joules between `t0` and `t1`: the cumulative counter at each end, linearly
        interpolated between the readings around it."""
        seconds = t1 - t0
        if not self.times or t0 < self.times[0] or t1 > self.times[-1] or seconds <= 0:
            return WindowEnergy(self.name, self.method, max(seconds, 0.0), None, False,
                                "the readings do not cover the window")
        try:
            counts = unwrap(self.raw, self.wrap)
        except CounterError as e:
            return WindowEnergy(self.name, self.method, seconds, None, False, str(e))
        joules = (_interp(self.times, counts, t1) - _interp(self.times, counts, t0)) * self.unit_j
        if seconds < self.min_window_s - 1e-9:  # (t0 + 1) - t0 may round below 1
            return WindowEnergy(self.name, self.method, seconds, joules, False,
                                f"a {seconds:.2f} s window is shorter than the "
                                f"{self.min_window_s:g} s that {self.method} resolves")
        if joules <= 0:
            return WindowEnergy(self.name, self.method, seconds, joules, False,
                                "the counter did not advance over the window")
        return WindowEnergy(self.name, self.method, seconds, joules, True)


def _interp(times: Sequence[float], values: Sequence[float], t: float) -> float:
    """`values` at `t`, linear between the two readings around it (`times` ascending)."""
    lo, hi = 0, len(times) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if times[mid] <= t:
            lo = mid
        else:
            hi = mid
    t_lo, t_hi = times[lo], times[hi]
    if t_hi == t_lo:
        return values[hi] if t >= t_hi else values[lo]
    return values[lo] + (values[hi] - values[lo]) * (t - t_lo) / (t_hi - t_lo)


class EnergySampler:
    """Reads `meters` from `start()` to `stop()` (or as a context manager): at both ends and
    every `period` seconds between, on a thread of its own. `window(t0, t1)` gives each meter's
    energy over a window inside that span."""

    def __init__(self, meters: Iterable[EnergyMeter], period: float = SAMPLE_PERIOD_S,
                 clock=time.perf_counter):
        self.meters = list(meters)
        self.traces = [CounterTrace.of(m) for m in self.meters]
        self.period, self.clock = period, clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        for m, tr in zip(self.meters, self.traces):
            before = self.clock()  # a read can take milliseconds (NVML in a sandbox: 4 ms)
            tr.raw.append(m.read())
            tr.times.append((before + self.clock()) / 2)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.sample()

    def start(self) -> "EnergySampler":
        if self.meters:
            self.sample()
            self._thread = threading.Thread(target=self._loop, name="energy-sampler",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.sample()

    def __enter__(self) -> "EnergySampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def window(self, t0: float, t1: float) -> list[WindowEnergy]:
        return [tr.window(t0, t1) for tr in self.traces]

    def span(self) -> list[WindowEnergy]:
        """Each meter's energy from its first reading to its last (start to stop)."""
        return [tr.window(tr.times[0], tr.times[-1]) if tr.times else tr.window(0.0, 0.0)
                for tr in self.traces]


# ---- NVIDIA GPUs: NVML ----------------------------------------------------------------------

@dataclass
class NvmlMeter:
    """A GPU's energy since the driver loaded (nvmlDeviceGetTotalEnergyConsumption, mJ;
    Volta and newer)."""

    name: str
    handle: object
    method: str = "nvml"
    unit_j: float = 1e-3
    wrap: float | None = None
    min_window_s: float = NVML_MIN_WINDOW_S

    def read(self) -> float:
        import pynvml

        return float(pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))


def nvml_device_id(cuda_index: int, visible: str | None) -> int | str:
    """The NVML device (an index, or a UUID) of CUDA device `cuda_index`, given
    CUDA_VISIBLE_DEVICES (`visible`): CUDA renumbers the devices it is shown from 0, NVML
    does not."""
    if not visible:
        return cuda_index
    shown = [v.strip() for v in visible.split(",") if v.strip()]
    if cuda_index >= len(shown):
        raise IndexError(f"CUDA_VISIBLE_DEVICES={visible} shows no device {cuda_index}")
    v = shown[cuda_index]
    return int(v) if v.isdigit() else v


def nvml_meters(gpus: dict[str, int]) -> tuple[list[NvmlMeter], dict[str, str]]:
    """Meters for the GPUs {element name: CUDA device index}, and for each GPU that has none,
    why (no pynvml, no driver, a GPU older than Volta, ...)."""
    if not gpus:
        return [], {}
    try:
        import pynvml
    except ImportError:
        return [], {g: "no NVML: pynvml is not installed (pip install nvidia-ml-py)"
                    for g in gpus}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return [], {g: f"no NVML: {e}" for g in gpus}
    meters, missing = [], {}
    for name, index in gpus.items():
        try:
            dev = nvml_device_id(index, os.environ.get("CUDA_VISIBLE_DEVICES"))
            handle = (pynvml.nvmlDeviceGetHandleByIndex(dev) if isinstance(dev, int)
                      else pynvml.nvmlDeviceGetHandleByUUID(dev))
            pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # NOT_SUPPORTED before Volta
        except (pynvml.NVMLError, IndexError) as e:
            missing[name] = f"no NVML energy counter for CUDA device {index}: {e}"
            continue
        meters.append(NvmlMeter(name, handle))
    return meters, missing


# ---- CPUs: RAPL through powercap --------------------------------------------------------------

@dataclass
class RaplMeter:
    """One CPU package's RAPL counter (energy_uj, wrapping at max_energy_range_uj)."""

    name: str
    path: Path  # the zone's folder, e.g. /sys/class/powercap/intel-rapl:0
    wrap: float | None
    method: str = "rapl"
    unit_j: float = 1e-6
    min_window_s: float = RAPL_MIN_WINDOW_S

    def read(self) -> float:
        return float((self.path / "energy_uj").read_text())


def rapl_meters(root: Path = POWERCAP) -> tuple[list[RaplMeter], str | None]:
    """A meter for each CPU package's RAPL zone under `root` (its sub-zones, cores and DRAM,
    are parts of the package or beside it, and are left out), or none and why."""
    zones = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1) \
        if root.is_dir() else []
    if not zones:
        return [], f"no RAPL: no {root}/intel-rapl:* (a VM, or not an x86 machine?)"
    meters = []
    for z in zones:
        label = _read(z / "name") or z.name
        if not label.startswith("package"):
            continue  # psys (the whole platform) would count the packages twice
        try:
            float((z / "energy_uj").read_text())
        except PermissionError:
            return [], f"no RAPL: permission denied reading {z / 'energy_uj'} (root only)"
        except (OSError, ValueError) as e:
            return [], f"no RAPL: {z / 'energy_uj'}: {e}"
        wrap = _read(z / "max_energy_range_uj")
        meters.append(RaplMeter(f"cpu {label}", z, float(wrap) if wrap else None))
    if not meters:
        return [], f"no RAPL: no package zone under {root}"
    return meters, None


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


def finite_or_none(x: float | None) -> float | None:
    """`x`, or None for a missing or non-finite figure (strict JSON has no NaN)."""
    return x if x is not None and math.isfinite(x) else None
