from collections.abc import Iterator

import pytest
from hypothesis import given, settings, strategies as st

from hetflow.errors import InputError
from hetflow.platform import (CpuCluster, Platform, cluster_partitions, configurations,
                              count_configurations, distinct_elements, integer_partitions,
                              load_platform, platform_from_dict)
from hetflow.platform.configs import finest_config, partition_count, resolve_config
from hetflow.platform.spec import cpu_element_name


def test_partitions_of_4_are_kangs_five_configurations():
    assert list(integer_partitions(4)) == [(4,), (3, 1), (2, 2), (2, 1, 1), (1, 1, 1, 1)]


@pytest.mark.parametrize("n, count", [(1, 1), (2, 2), (4, 5), (6, 11), (8, 22), (16, 231)])
def test_partition_counts(n, count):
    assert sum(1 for _ in integer_partitions(n)) == count == partition_count(n)


def test_cluster_partitions_map_parts_to_contiguous_core_groups():
    big = CpuCluster("big", (4, 5, 6, 7))
    groups = list(cluster_partitions(big))
    assert groups[1] == ((4, 5, 6), (7,))
    assert groups[3] == ((4, 5), (6,), (7,))
    assert [cpu_element_name(g) for g in groups[2]] == ["cpu4-5", "cpu6-7"]
    assert list(cluster_partitions(big, exclude=[4]))[0] == ((5, 6, 7),)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 63), min_size=1, max_size=9, unique=True))
def test_every_partition_covers_the_cluster_exactly_once(cores):
    cl = CpuCluster("c", tuple(cores))
    n = 0
    for groups in cluster_partitions(cl):
        flat = [c for g in groups for c in g]
        assert sorted(flat) == sorted(cores) and len(flat) == len(set(flat))
        assert [len(g) for g in groups] == sorted((len(g) for g in groups), reverse=True)
        n += 1
    assert n == partition_count(len(cores))


def test_element_names():
    assert cpu_element_name((0, 1, 2, 3)) == "cpu0-3"
    assert cpu_element_name((2,)) == "cpu2"
    assert cpu_element_name((5, 0, 3, 4)) == "cpu0,3-5"


def test_configurations_are_lazy_and_counted():
    hikey = load_platform("hikey970")  # big 4 cores, little 4 minus the GPU's driving core
    it = configurations(hikey)
    assert isinstance(it, Iterator)
    configs = list(it)
    assert len(configs) == count_configurations(hikey) == 5 * 3
    assert configs[0].label == "big:4 little:3"
    assert [e.name for e in configs[0].elements] == ["cpu4-7", "cpu1-3", "gpu0", "npu"]
    assert len({c.label for c in configs}) == len(configs)


def test_driving_core_belongs_to_the_gpu_only():
    tx2 = load_platform("jetson_tx2")
    for cfg in configurations(tx2):
        gpu = cfg.element("gpu0")
        assert gpu.cores == (5,)
        assert all(5 not in e.cores for e in cfg.elements if e.kind == "cpu")
        cpu_cores = sorted(c for e in cfg.elements if e.kind == "cpu" for c in e.cores)
        assert cpu_cores == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("name", ["hikey970", "jetson_tx2"])
def test_the_finest_configuration_is_one_element_per_free_core_beside_the_devices(name):
    """The last of the configurations (all parts of one core), found without enumerating."""
    p = load_platform(name)
    finest = finest_config(p)
    assert finest == list(configurations(p))[-1]
    cpus = [e for e in finest.elements if e.kind == "cpu"]
    assert all(len(e.cores) == 1 for e in cpus)
    assert sorted(c for e in cpus for c in e.cores) == sorted(
        c for cl in p.clusters for c in p.free_cores(cl))


def test_six_core_cluster_has_eleven_configurations():
    p = platform_from_dict({"name": "six", "clusters": [{"name": "c", "cores": "0-5"}]}, "six.yaml")
    assert count_configurations(p) == 11 == sum(1 for _ in configurations(p))


def test_sixteen_cores_enumerate_quickly():
    p = platform_from_dict({"name": "x", "clusters": [{"name": "c", "cores": "0-15"}]}, "x.yaml")
    assert sum(1 for _ in configurations(p)) == 231
    assert len(p.all_elements()) == len({e.name for e in p.all_elements()})


def test_resolve_config_labels_and_errors():
    hikey = load_platform("hikey970")
    cfg = resolve_config(hikey, "big:1+3 little:2+1")
    assert [e.name for e in cfg.elements if e.kind == "cpu"] == ["cpu4-6", "cpu7", "cpu1-2", "cpu3"]
    assert [e.name for e in hikey.elements({"big": [2, 2]})][:2] == ["cpu4-5", "cpu6-7"]
    assert [e.name for e in hikey.elements("little:0")][:2] == ["cpu4-7", "gpu0"]
    with pytest.raises(InputError, match="parts of cluster 'big' sum to 3, but it has 4 free cores"):
        hikey.elements("big:2+1")
    with pytest.raises(InputError, match="has no cluster 'mid'"):
        hikey.elements("mid:1")
    with pytest.raises(InputError, match="cannot read 'big=4'"):
        hikey.elements("big=4")


def test_default_elements_and_distinct_groups():
    p = Platform("two", (CpuCluster("cpu", (0, 1)),))
    assert [e.name for e in p.elements()] == ["cpu0-1"]
    every = p.all_elements()
    assert [e.name for e in every] == ["cpu0-1", "cpu0", "cpu1"]
    groups = distinct_elements(every)
    assert {r.name: [m.name for m in ms] for r, ms in groups.items()} == {
        "cpu0-1": ["cpu0-1"], "cpu0": ["cpu0", "cpu1"]}


def test_cpu_element_nominal_rates_scale_with_cores():
    vim3 = load_platform("khadas_vim3")
    e = vim3.elements("big:3+1")[0]
    assert e.name == "cpu2-4" and e.peak_gflops == pytest.approx(3 * 17.6)
    assert e.power_w == pytest.approx(3 * 0.9)
