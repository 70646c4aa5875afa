"""The mapping problem of a cluster (`hetflow.platform.cluster`): layer times of `node:element`
from each node's profile, transfers within a node from its profile and across nodes from the
link models."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from hetflow.errors import InputError
from hetflow.platform.cluster import Cluster, split_element

from hetflow.mapping.problem import Problem

if TYPE_CHECKING:
    from hetflow.model.graph import CnnGraph
    from hetflow.profile.profile import Profile


@dataclass
class ClusterTransfer:
    """`Problem.transfer` for a cluster: (nbytes, src element, dst element) -> seconds.

    Within a node: the node's profile model (or its measured Ray hand-off, `ray_local`).
    Across nodes: the link model, plus the device->host copy on the sending node and the
    host->device copy on the receiving one when an end is a GPU or accelerator.
    """

    cluster: Cluster
    profiles: Mapping[str, "Profile"]  # node -> its profile
    ray_local: bool = False  # within a node, price the Ray object-store hand-off where measured

    def __call__(self, nbytes: int, src: str, dst: str) -> float:
        if src == dst or nbytes <= 0:
            return 0.0
        sn, se = split_element(src)
        dn, de = split_element(dst)
        if sn is None or dn is None:
            raise InputError(f"elements {src!r} and {dst!r}: cluster elements are named "
                             "node:element")
        if sn == dn:
            local = self.cluster.node(sn).local_link
            if self.ray_local and local is not None:
                return local.time(nbytes)
            return self._profile(sn).transfer_time(nbytes, se, de)
        t = self.cluster.link(sn, dn).time(nbytes)
        for node, el, to_host in ((sn, se, True), (dn, de, False)):
            kind = self._profile(node)._kind(el)
            if kind != "cpu":
                m = self._profile(node).link(kind, "cpu") if to_host else \
                    self._profile(node).link("cpu", kind)
                t += m["a"] + m["b"] * nbytes
        return t

    def _profile(self, node: str) -> "Profile":
        try:
            return self.profiles[node]
        except KeyError:
            raise InputError(f"no profile for node {node!r} (profiles: "
                             f"{', '.join(sorted(self.profiles)) or 'none'})") from None


@dataclass(frozen=True)
class ClusterProblem(Problem):
    """A mapping problem over cluster elements: elements of different nodes never share cores."""

    def shares_cores(self, a, b) -> bool:
        return (split_element(a.name)[0] == split_element(b.name)[0]
                and super().shares_cores(a, b))


def cluster_problem(graph: "CnnGraph", cluster: Cluster, profiles: Mapping[str, "Profile"],
                    configs: Mapping[str, Any] | None = None, capacity_frames: int = 2,
                    call_overhead: float | None = None, ray_local: bool = True) -> ClusterProblem:
    """The mapping problem of `graph` on one configuration of every node of `cluster`.

    `profiles[node]`: that node's profile (nodes with the same hardware may share one). Layer
    times of `node:element` are the node profile's times of `element`; transfers follow
    `ClusterTransfer`. One configuration per node keeps the search space small; call again with
    other `configs` to compare configurations.
    """
    elements = cluster.elements(configs)
    times = np.empty((len(graph.layers), len(elements)))
    for j, e in enumerate(elements):
        node, local = split_element(e.name)
        prof = ClusterTransfer(cluster, profiles)._profile(node)
        prof.check_matches(graph, cluster.node(node).platform)
        for i, layer in enumerate(graph.layers):
            times[i, j] = prof.layer_time(layer.name, local)
    overhead = call_overhead if call_overhead is not None else max(
        p.engine_firing() for p in profiles.values())
    return ClusterProblem(graph, elements, times, ClusterTransfer(cluster, profiles, ray_local),
                          overhead, capacity_frames, configurations=[[e.name for e in elements]])
