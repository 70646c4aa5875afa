"""Processing-element configurations of a platform (Kang et al. 2020, Section III, Fig. 1).

A 4-core cluster can be one PE of 4 cores (intra-layer parallelism), four PEs of one core
(inter-layer parallelism), or anything between: (3,1), (2,2), (2,1,1). A configuration picks one
integer partition per cluster; the parts are mapped to contiguous runs of the cluster's cores
(cores of a cluster are alike, so which run gets which part does not matter).

Cores that drive a GPU or accelerator are excluded from CPU groups: the driving thread must react
quickly to kernel completions, and a compute stage pinned to the same core would delay it. A GPU
element therefore owns its driving core.

Enumeration is lazy: 16 cores have 231 partitions per cluster, and the product over clusters is
only walked as far as the caller goes.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

from hetflow.errors import InputError
from hetflow.platform.precision import element_name
from hetflow.platform.spec import CpuCluster, Platform, ProcessingElement, cpu_element_name


def integer_partitions(n: int, max_part: int | None = None) -> Iterator[tuple[int, ...]]:
    """Partitions of n into non-increasing parts, largest first: 4 -> (4), (3,1), (2,2), ..."""
    if n == 0:
        yield ()
        return
    for first in range(min(n, max_part or n), 0, -1):
        for rest in integer_partitions(n - first, first):
            yield (first, *rest)


def partition_count(n: int) -> int:
    """p(n) without enumerating (Euler's recurrence would do; n is small, so count by DP)."""
    ways = [1] + [0] * n
    for part in range(1, n + 1):
        for total in range(part, n + 1):
            ways[total] += ways[total - part]
    return ways[n]


def groups_for(cores: tuple[int, ...], parts: Iterable[int]) -> tuple[tuple[int, ...], ...]:
    """Map part sizes to contiguous runs of `cores` (in the cluster's order)."""
    out, start = [], 0
    for p in parts:
        out.append(tuple(cores[start:start + p]))
        start += p
    return tuple(out)


def cluster_partitions(cluster: CpuCluster, exclude: Iterable[int] = ()
                       ) -> Iterator[tuple[tuple[int, ...], ...]]:
    """Every way to split the cluster's cores (minus `exclude`) into PEs, as core groups."""
    ex = set(exclude)
    cores = tuple(c for c in cluster.cores if c not in ex)
    for parts in integer_partitions(len(cores)):
        yield groups_for(cores, parts)


@dataclass(frozen=True)
class PeConfig:
    """One configuration: part sizes per cluster, and the resulting elements (devices included)."""

    parts: tuple[tuple[str, tuple[int, ...]], ...]  # (cluster name, part sizes)
    elements: tuple[ProcessingElement, ...]

    @property
    def label(self) -> str:
        """'big:3+1 little:1+1' (parseable by `parse_config_label`)."""
        return " ".join(f"{c}:{'+'.join(map(str, p)) or '0'}" for c, p in self.parts)

    def element(self, name: str) -> ProcessingElement:
        for e in self.elements:
            if e.name == name:
                return e
        raise KeyError(name)


def cpu_element(cluster: CpuCluster, cores: tuple[int, ...]) -> ProcessingElement:
    n = len(cores)
    share = n / len(cluster.cores)
    return ProcessingElement(
        name=element_name(cpu_element_name(cores), cluster.precision), kind="cpu",
        cores=tuple(cores), cluster=cluster.name, precision=cluster.precision,
        freq_mhz=cluster.max_freq_mhz,
        power_w=None if cluster.power_w_per_core is None else cluster.power_w_per_core * n,
        peak_gflops=None if cluster.peak_gflops_per_core is None
        else cluster.peak_gflops_per_core * n,
        # crude: the cluster's bandwidth shared in proportion to cores (an estimate)
        mem_gbps=None if cluster.mem_gbps is None else cluster.mem_gbps * share,
        model=cluster.core_type)


def device_elements(platform: Platform) -> list[ProcessingElement]:
    """The GPU and accelerator elements (present in every configuration)."""
    out = []
    for g in platform.gpus:
        cl = platform.cluster_of(g.driver_core)
        out.append(ProcessingElement(
            name=element_name(g.element_name, g.precision), kind="gpu",
            cores=(g.driver_core, *g.staging_cores),
            precision=g.precision,
            cluster=cl.name if cl else None, device_index=g.index, freq_mhz=g.freq_mhz,
            power_w=g.power_w, peak_gflops=g.peak_gflops, mem_gbps=g.mem_gbps,
            backend=g.backend, model=g.name))
    for a in platform.accelerators:
        out.append(ProcessingElement(
            name=a.name, kind="accel", cores=() if a.driver_core is None else (a.driver_core,),
            freq_mhz=a.freq_mhz, power_w=a.power_w, speed_factor=a.speed_factor,
            relative_to=a.relative_to, peak_gflops=a.peak_gflops, mem_gbps=a.mem_gbps,
            backend=a.backend, model=a.model or a.name, resources=dict(a.resources)))
    return out


def build_config(platform: Platform, parts: Mapping[str, tuple[int, ...]]) -> PeConfig:
    """The configuration with the given part sizes per cluster (sizes must cover each
    cluster's free cores; `resolve_config` checks user input, this does not)."""
    elements: list[ProcessingElement] = []
    for cl in platform.clusters:
        free = platform.free_cores(cl)
        elements += [cpu_element(cl, g) for g in groups_for(free, parts[cl.name])]
    elements += device_elements(platform)
    return PeConfig(tuple((cl.name, tuple(parts[cl.name])) for cl in platform.clusters),
                    tuple(elements))


_build = build_config  # older name, used by hetflow.mapping.from_profile


def configurations(platform: Platform) -> Iterator[PeConfig]:
    """All configurations: the cartesian product of each cluster's partitions (lazy).
    A cluster whose cores all drive devices contributes no CPU element."""
    per_cluster = [list(integer_partitions(len(platform.free_cores(cl))))
                   for cl in platform.clusters]
    names = [cl.name for cl in platform.clusters]
    for combo in itertools.product(*per_cluster):
        yield build_config(platform, dict(zip(names, combo)))


def count_configurations(platform: Platform) -> int:
    n = 1
    for cl in platform.clusters:
        n *= partition_count(len(platform.free_cores(cl)))
    return n


def default_config(platform: Platform) -> PeConfig:
    """Each cluster as one element (minus driving cores)."""
    sizes = {cl.name: len(platform.free_cores(cl)) for cl in platform.clusters}
    return build_config(platform, {name: (n,) if n else () for name, n in sizes.items()})


def finest_config(platform: Platform) -> PeConfig:
    """Each free core its own element, beside the devices: where the parallel copies run."""
    return build_config(platform, {cl.name: (1,) * len(platform.free_cores(cl))
                                   for cl in platform.clusters})


def parse_config_label(platform: Platform, label: str) -> dict[str, tuple[int, ...]]:
    """'big:3+1 little:2' -> {'big': (3, 1), 'little': (2,)}; 'little:0' leaves it unused."""
    parts: dict[str, tuple[int, ...]] = {}
    for item in label.replace(",", " ").split():
        m = re.fullmatch(r"([^:]+):(\d+(?:\+\d+)*)", item)
        if not m:
            raise InputError(f"configuration {label!r}: cannot read {item!r} "
                             f"(write e.g. 'big:3+1 little:1+1')")
        parts[m.group(1)] = tuple(int(x) for x in m.group(2).split("+") if int(x) > 0)
    return parts


def resolve_config(platform: Platform,
                   config: PeConfig | Mapping[str, Iterable[int]] | str | None) -> PeConfig:
    """A configuration given as None (default), a PeConfig, a label or a mapping."""
    if config is None:
        return default_config(platform)
    if isinstance(config, PeConfig):
        return config
    label = config if isinstance(config, str) else repr(dict(config))
    raw = parse_config_label(platform, config) if isinstance(config, str) else {
        k: tuple(int(x) for x in v if int(x) > 0) for k, v in config.items()}
    known = {cl.name for cl in platform.clusters}
    for name in raw:
        if name not in known:
            raise InputError(f"configuration {label!r}: platform {platform.name!r} has no "
                             f"cluster {name!r} (clusters: {', '.join(sorted(known)) or 'none'})")
    parts: dict[str, tuple[int, ...]] = {}
    for cl in platform.clusters:
        free = len(platform.free_cores(cl))
        p = tuple(sorted(raw.get(cl.name, (free,) if free else ()), reverse=True))
        if p and sum(p) != free:
            raise InputError(f"configuration {label!r}: the parts of cluster {cl.name!r} sum to "
                             f"{sum(p)}, but it has {free} free cores")
        parts[cl.name] = p
    return build_config(platform, parts)


def all_elements(platform: Platform) -> list[ProcessingElement]:
    """Every element of every configuration, each once: all core groups any partition makes,
    per cluster largest first, then the devices."""
    out: list[ProcessingElement] = []
    for cl in platform.clusters:
        groups = {g for gs in cluster_partitions(cl, exclude=platform.driver_cores) for g in gs}
        out += [cpu_element(cl, g) for g in sorted(groups, key=lambda g: (-len(g), g))]
    return out + device_elements(platform)


def distinct_elements(elements: Iterable[ProcessingElement]
                      ) -> dict[ProcessingElement, list[ProcessingElement]]:
    """Group elements that run alike (same kind, cluster and core count): representative ->
    the elements it stands for (itself included). The first of each group represents it."""
    groups: dict[tuple, list[ProcessingElement]] = {}
    for e in elements:
        groups.setdefault(e.equivalence_key, []).append(e)
    return {g[0]: g for g in groups.values()}
