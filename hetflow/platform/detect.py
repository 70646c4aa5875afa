"""Describe the machine hetflow runs on: usable cores, clusters by maximum frequency, CUDA GPUs.

torch is imported only if it is installed, and only here: no torch means no GPUs, not an error.
"""
from __future__ import annotations

import importlib.util
import os
import platform as _pyplatform
from pathlib import Path
from typing import Sequence

from hetflow.errors import InputError
from hetflow.platform.spec import CpuCluster, Gpu, Platform, format_cores
import psutil

SYS_CPU = Path("/sys/devices/system/cpu")


def usable_cores() -> tuple[int, ...]:
    """Cores this process may run on (respects taskset / cgroup cpusets)."""
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))

    return tuple(range(psutil.cpu_count(logical=True) or 1))


def core_max_freq_mhz(core: int, sys_cpu: Path = SYS_CPU) -> float | None:
    """cpuinfo_max_freq of one core (kHz in sysfs), None where the kernel does not say."""
    try:
        return int((sys_cpu / f"cpu{core}/cpufreq/cpuinfo_max_freq").read_text()) / 1000.0
    except (OSError, ValueError):
        return None


def core_cur_freq_mhz(core: int, sys_cpu: Path = SYS_CPU) -> float | None:
    """Current frequency of one core, from sysfs, else psutil (which may be machine-wide)."""
    for f in ("scaling_cur_freq", "cpuinfo_cur_freq"):
        try:
            return int((sys_cpu / f"cpu{core}/cpufreq/{f}").read_text()) / 1000.0
        except (OSError, ValueError):
            pass
    try:
        import psutil

        per = psutil.cpu_freq(percpu=True)
        if per and core < len(per) and per[core].current:
            return float(per[core].current)
        tot = psutil.cpu_freq()
        return float(tot.current) if tot and tot.current else None
    except Exception:  # psutil has no frequency source on some VMs
        return None


def _cpu_model_name() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return _pyplatform.processor() or None


def group_clusters(freqs: dict[int, float | None]
                   ) -> list[tuple[str, tuple[int, ...], float | None]]:
    """Group cores by maximum frequency: one cluster where all agree (or none is known),
    else 'big' / 'little' (two frequencies) or 'c0', 'c1', ... fastest first."""
    known = {f for f in freqs.values() if f is not None}
    if len(known) <= 1:
        return [("cpu", tuple(sorted(freqs)), next(iter(known), None))]
    levels = sorted(known, reverse=True)
    names = ["big", "little"] if len(levels) == 2 else [f"c{i}" for i in range(len(levels))]
    out = []
    for name, f in zip(names, levels):
        out.append((name, tuple(sorted(c for c, fc in freqs.items() if fc == f)), f))
    unknown = tuple(sorted(c for c, fc in freqs.items() if fc is None))
    if unknown:
        out.append(("unknown", unknown, None))
    return out


def cuda_gpus() -> list[tuple[int, str]]:
    """(index, name) of each CUDA GPU torch sees; [] without torch or CUDA."""
    if importlib.util.find_spec("torch") is None:
        return []
    import torch

    if not torch.cuda.is_available():
        return []
    return [(i, torch.cuda.get_device_name(i)) for i in range(torch.cuda.device_count())]


# Staging cores a GPU gets: one for every STAGING_EVERY cores the machine has per GPU beyond
# STAGING_EVERY, at most MAX_STAGING. One thread copying 224 x 224 frames caps a batched GPU
# near 20,000 frames/s (backends.staging). On the H200 machine (16 cores) the GPU alone at
# fp16 x4 b32 ran, with 0 / 1 / 2-3 / 6-7 helpers: alexnet 12,556 / 23,010 / 36,237 / 24,430
# frames/s, resnet18 11,036 / 26,668 / 39,192 / 28,146 (more threads than that hand off more
# than they copy). A phone-class board keeps its cores for CPU elements.
STAGING_EVERY = 4
MAX_STAGING = 3


def gpu_host_cores(cores: Sequence[int], gpus: int) -> list[tuple[int, tuple[int, ...]]]:
    """(driver core, staging cores) of GPU i = 0..gpus-1: GPU i is driven by the i-th core
    from the end; the cores before the drivers stage, `staging_count` a GPU, taken in turn."""
    if gpus <= 0:
        return []
    n = staging_count(len(cores), gpus)
    before = list(cores[:len(cores) - gpus])[::-1]  # the cores before the drivers, last first
    return [(cores[-1 - i % len(cores)], tuple(before[i + gpus * j] for j in range(n)))
            for i in range(gpus)]


def staging_count(cores: int, gpus: int) -> int:
    """Staging cores a GPU gets on a machine of `cores` cores and `gpus` GPUs."""
    per_gpu = cores // gpus
    return max(0, min(MAX_STAGING, (per_gpu - STAGING_EVERY) // STAGING_EVERY))


def detect_platform(name: str | None = None) -> Platform:
    """The platform of this machine: its cores grouped into clusters by clock, each CUDA GPU
    with its host cores (`gpu_host_cores`)."""
    cores = usable_cores()
    freqs = {c: core_max_freq_mhz(c) for c in cores}
    model = _cpu_model_name()
    clusters = tuple(CpuCluster(name=n, cores=cs, core_type=model, max_freq_mhz=f)
                     for n, cs, f in group_clusters(freqs))
    found = cuda_gpus()
    gpus = tuple(Gpu(index=i, name=gname, driver_core=driver, staging_cores=staging)
                 for (i, gname), (driver, staging) in zip(found, gpu_host_cores(cores, len(found))))
    return Platform(name=name or _pyplatform.node() or "local", clusters=clusters, gpus=gpus,
                    description=f"detected by hetflow on {_pyplatform.node()}",
                    source="auto")


def check_cores_present(elements, what: str) -> None:
    """InputError naming the element if it uses a core this process cannot run on (a plan made
    for another machine: its runners would fail deep inside ONNX Runtime's thread pinning)."""
    usable = set(usable_cores())
    for e in elements:
        missing = [c for c in e.cores if c not in usable]
        if missing:
            raise InputError(f"{what}: element {e.name} uses core {missing[0]}, which is not "
                             f"available on this machine (usable: {format_cores(usable)}); "
                             "map the model for this machine's platform")


def check_devices_present(platform: Platform) -> None:
    """InputError naming the setting if a core or GPU of `platform` is not on this machine."""
    src = platform.source or platform.name
    usable = set(usable_cores())
    for i, cl in enumerate(platform.clusters):
        missing = [c for c in cl.cores if c not in usable]
        if missing:
            raise InputError(f"{src}: clusters[{i}].cores: core {missing[0]} is not available "
                             f"on this machine (usable: {sorted(usable)})")
    if not platform.gpus:
        return
    found = {i for i, _ in cuda_gpus()}
    for i, g in enumerate(platform.gpus):
        if g.backend == "none":
            continue
        if g.index not in found:
            why = ("torch is not installed" if importlib.util.find_spec("torch") is None
                   else f"CUDA GPUs here: {sorted(found) or 'none'}")
            raise InputError(f"{src}: gpus[{i}].index: GPU {g.index} does not exist ({why})")
