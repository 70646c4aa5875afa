import importlib.util
import os

import pytest
from hypothesis import given, strategies as st

from hetflow.platform import detect_platform, platform_from_dict
from hetflow.platform.detect import (MAX_STAGING, core_max_freq_mhz, gpu_host_cores,
                                     group_clusters, staging_count)
from hetflow.platform.load import dump_platform

HAS_TORCH = importlib.util.find_spec("torch") is not None


def test_detect_finds_the_usable_cores():
    p = detect_platform()
    assert p.cores == tuple(sorted(os.sched_getaffinity(0)))
    p.check_devices()
    # what `platform detect` writes reads back as the same platform
    import yaml

    again = platform_from_dict(yaml.safe_load(dump_platform(p)), "detected.yaml")
    assert again.platform_hash == p.platform_hash


@pytest.mark.skipif(HAS_TORCH, reason="torch is installed here; the no-torch path is not testable")
def test_no_torch_means_no_gpus():
    assert detect_platform().gpus == ()


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_cuda_gpus_are_driven_by_the_last_cores():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    p = detect_platform()
    assert len(p.gpus) == torch.cuda.device_count()
    assert p.gpus[0].driver_core == p.cores[-1]
    assert all(p.gpus[0].driver_core not in e.cores for e in p.elements() if e.kind == "cpu")


def test_group_clusters_by_max_frequency():
    assert group_clusters({0: None, 1: None}) == [("cpu", (0, 1), None)]
    assert group_clusters({0: 2000.0, 1: 2000.0}) == [("cpu", (0, 1), 2000.0)]
    assert group_clusters({0: 1800.0, 1: 1800.0, 2: 2360.0, 3: 2360.0}) == [
        ("big", (2, 3), 2360.0), ("little", (0, 1), 1800.0)]
    three = group_clusters({0: 1.0, 1: 2.0, 2: 3.0, 3: None})
    assert [n for n, _, _ in three] == ["c0", "c1", "c2", "unknown"]


def test_core_max_freq_reads_sysfs(tmp_path):
    (tmp_path / "cpu3" / "cpufreq").mkdir(parents=True)
    (tmp_path / "cpu3" / "cpufreq" / "cpuinfo_max_freq").write_text("2360000\n")
    assert core_max_freq_mhz(3, tmp_path) == 2360.0
    assert core_max_freq_mhz(4, tmp_path) is None


@pytest.mark.parametrize("cores, gpus, want", [
    (range(16), 1, [(15, (14, 13, 12))]),
    (range(8), 1, [(7, (6,))]),
    (range(32), 2, [(31, (29, 27, 25)), (30, (28, 26, 24))]),
    (range(16), 2, [(15, (13,)), (14, (12,))]),
    (range(6), 1, [(5, ())]),  # a phone-class board keeps its cores for CPU elements
    (range(12), 2, [(11, ()), (10, ())]),
    (range(4), 0, []),
])
def test_gpu_host_cores(cores, gpus, want):
    assert gpu_host_cores(tuple(cores), gpus) == want


@given(cores=st.integers(1, 96), gpus=st.integers(0, 8))
def test_host_cores_of_gpus_never_overlap(cores, gpus):
    """Drivers and staging cores are distinct cores of the machine, as many staging cores a
    GPU as `staging_count` says, never more than MAX_STAGING."""
    got = gpu_host_cores(tuple(range(cores)), gpus) if gpus <= cores else None
    if got is None:
        return
    used = [c for d, st_ in got for c in (d, *st_)]
    assert len(used) == len(set(used)) and set(used) <= set(range(cores))
    assert all(len(st_) == staging_count(cores, gpus) <= MAX_STAGING for _, st_ in got)
