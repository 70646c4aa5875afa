from hypothesis import given, strategies as st

from hetflow.mapping.from_profile import _curated_partitions, select_configurations
from hetflow.platform import CpuCluster, Platform


@given(st.integers(0, 64))
def test_curated_partitions_split_all_the_cores(n):
    parts = _curated_partitions(n)
    assert len(parts) == len(set(parts))
    for p in parts:
        assert sum(p) == n and all(x > 0 for x in p)
    if n:
        assert (n,) in parts and (1,) * n in parts
    # every group size from 1 to 5 the cluster allows appears, for the latency/throughput trade-off
    for size in range(1, min(n, 5) + 1):
        assert any(size in p for p in parts), size


def test_a_big_cluster_gets_mid_size_core_groups():
    plat = Platform("big", (CpuCluster("c", tuple(range(16))),))
    sizes = {len(e.cores) for cfg in select_configurations(plat) for e in cfg.elements}
    assert {1, 2, 3, 4, 5, 8, 15, 16} <= sizes
