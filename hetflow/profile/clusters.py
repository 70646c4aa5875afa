"""Describe a running Ray cluster as a `hetflow.platform.cluster.Cluster`: each node's platform
detected on the node, and the links between nodes measured."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable

import numpy as np

from hetflow.errors import InputError
from hetflow.platform.cluster import Cluster, Link, Node, node_resource
from hetflow.platform.spec import Platform
import time
from hetflow.platform.detect import detect_platform
from hetflow.profile.comm import fit_linear
from hetflow.runtime.ray_engine import ray_session

DETECT_SIZES = (1 << 10, 64 << 10, 1 << 20, 4 << 20)


def detect_cluster(address: str | None = "auto", sizes: Iterable[int] = DETECT_SIZES,
                   repeats: int = 3, timeout: float = 120.0, name: str = "ray-cluster") -> Cluster:
    """Describe a running Ray cluster: each alive node's platform (detected on the node by a
    small Ray actor), the resources Ray reports, and the link between every ordered pair of
    nodes, fitted as a + b*bytes from object transfers between actors on the two nodes (what
    the Ray engine pays, Ray's own overheads included). Also the hand-off between two processes
    of one node (`local_link`).

    Nodes that advertise a `hetflow_node_<name>` resource take that name; others are named
    n0, n1, ... (head first) and placed by their address."""

    sizes = sorted(set(int(s) for s in sizes))
    if repeats < 1 or not sizes:
        raise InputError("detect_cluster: needs at least one size and one repeat")
    with ray_session(address) as ray:
        return _detect(ray, sizes, repeats, timeout, name)


def name_nodes(ray_nodes: list[dict[str, Any]]) -> list[tuple[str, str | None, str | None]]:
    """(name, ray_resource, address) for Ray's node records (alive ones, in the given order).
    A node with a `hetflow_node_X` resource is X; other nodes are n<i>, placed by address when
    that address is unique, else by the conventional `hetflow_node_n<i>` resource."""
    addrs = [n.get("NodeManagerAddress") for n in ray_nodes]
    out = []
    taken: set[str] = set()
    for i, n in enumerate(ray_nodes):
        marks = [r[len("hetflow_node_"):] for r in n.get("Resources", {})
                 if r.startswith("hetflow_node_")]
        if marks:
            out.append((marks[0], node_resource(marks[0]), n.get("NodeManagerAddress")))
        else:
            nm = f"n{i}"
            while nm in taken:
                nm += "_"
            unique = addrs.count(n.get("NodeManagerAddress")) == 1
            out.append((nm, None if unique else node_resource(nm),
                        n.get("NodeManagerAddress")))
        taken.add(out[-1][0])
    return out


def _detect(ray, sizes: list[int], repeats: int, timeout: float, name: str) -> Cluster:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


    alive = [n for n in ray.nodes() if n.get("Alive")]
    alive.sort(key=lambda n: (not n.get("Resources", {}).get("node:__internal_head__"),
                              n.get("NodeManagerAddress", ""), n["NodeID"]))
    named = name_nodes(alive)
    probe_cls = ray.remote(num_cpus=0, max_restarts=0)(_Probe)
    probes = [probe_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        n["NodeID"], soft=False)).remote() for n in alive]
    try:
        platforms = _get(ray, [p.platform.remote(nm) for p, (nm, _, _) in zip(probes, named)],
                         timeout, "detecting node platforms")

        def measure(i: int, j: int) -> Link:
            pts = []
            for n in sizes:
                for _ in range(repeats + 1):  # the first transfer of each size warms up
                    held = _get(ray, probes[i].make.remote(n), timeout, "making a probe object")
                    s = _get(ray, probes[j].fetch.remote(held), timeout,
                             f"fetching on node {named[j][0]} from {named[i][0]}")
                    pts.append((n, s))
            xs = [p[0] for k, p in enumerate(pts) if k % (repeats + 1)]
            ys = [p[1] for k, p in enumerate(pts) if k % (repeats + 1)]
            fit = fit_linear(xs, ys)
            return Link.from_ab(fit["a"], fit["b"])

        nodes = []
        for i, (n, (nm, res, addr)) in enumerate(zip(alive, named)):
            nodes.append(Node(nm, replace(platforms[i], name=f"{name}-{nm}"), addr, res,
                              {k: float(v) for k, v in n.get("Resources", {}).items()
                               if not k.startswith("node:")}, measure(i, i)))
        links = {(named[i][0], named[j][0]): measure(i, j)
                 for i in range(len(alive)) for j in range(len(alive)) if i != j}
    finally:
        for p in probes:
            ray.kill(p)
    return Cluster(name, tuple(nodes), links, None,
                   f"detected by hetflow on a Ray cluster of {len(nodes)} node(s)")


def _get(ray, refs, timeout: float, what: str):
    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise InputError(f"detect_cluster: timed out after {timeout:.0f} s {what}") from None
    except ray.exceptions.RayError as e:
        raise InputError(f"detect_cluster: failed {what}: {str(e).splitlines()[0]}") from None


class _Probe:
    """Lives on one node: detects its platform, makes and fetches objects for link timing."""

    def platform(self, name: str) -> Platform:

        return replace(detect_platform(), name=name)

    def make(self, nbytes: int) -> list:
        import ray

        # wrapped in a list so that the caller gets the reference, not the bytes
        return [ray.put(np.full(nbytes, 7, dtype=np.uint8))]

    def fetch(self, held: list) -> float:

        import ray

        t0 = time.perf_counter()
        arr = ray.get(held[0])
        t = time.perf_counter() - t0
        assert arr.nbytes > 0
        return t
