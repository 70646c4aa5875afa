"""Platforms that span machines: nodes (each with its own platform description) and the network
links between them, with a transfer-time model t = a + b * bytes per link.

Elements of a cluster are named `node:element` (`n1:cpu0`, `jetson:gpu0`); their cores stay the
node's own core ids (the runtime pins threads on that node). This module is the description;
the mapping problem of a cluster is in `hetflow.mapping.cluster`, the detection of a running Ray
cluster in `hetflow.profile.clusters`. Each cluster element carries the Ray
resource that places its worker on its node (`resources={'hetflow_node_n1': 0.001}`), so a plan
made from a cluster knows where every stage runs.

YAML (written by hand, or by `detect_cluster` on a running Ray cluster):

    name: gateway
    nodes:
      - {name: n1, platform: jetson_tx2}            # bundled name, YAML path, or inline mapping
      - {name: n2, platform: x86.yaml, address: 10.0.0.7}
    links:                                           # both directions unless directed: true
      - {src: n1, dst: n2, bandwidth_mbps: 1000, latency_ms: 0.3}
    default_link: {bandwidth_mbps: 100, latency_ms: 2}

Placement: a node's `ray_resource` (default `hetflow_node_<name>`; start the Ray node with
`--resources '{"hetflow_node_n1": 1}'`), or, with `address` and no `ray_resource`, Ray's built-in
`node:<address>` resource.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from hetflow.errors import InputError
from hetflow.platform.spec import Platform, ProcessingElement
import yaml
from hetflow.platform.load import load_platform, platform_from_dict


NODE_SEP = ":"
PLACEMENT_SHARE = 0.001  # of the node resource each worker claims: only placement, no limit
NODE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")


def split_element(name: str) -> tuple[str | None, str]:
    """'n1:cpu0' -> ('n1', 'cpu0'); 'cpu0' -> (None, 'cpu0')."""
    node, sep, local = name.partition(NODE_SEP)
    return (node, local) if sep else (None, name)


def node_resource(node: str) -> str:
    """The custom Ray resource that marks node `node` (by convention)."""
    return f"hetflow_node_{node}"


@dataclass(frozen=True)
class Link:
    """A network link: seconds to move n bytes = latency + n / bandwidth."""

    latency_s: float
    bandwidth_bps: float  # bytes per second (inf: latency only)

    @property
    def a(self) -> float:
        return self.latency_s

    @property
    def b(self) -> float:
        return 0.0 if math.isinf(self.bandwidth_bps) else 1.0 / self.bandwidth_bps

    def time(self, nbytes: float) -> float:
        return self.a + self.b * nbytes if nbytes > 0 else 0.0

    @staticmethod
    def from_ab(a: float, b: float) -> "Link":
        return Link(float(a), math.inf if b <= 0 else 1.0 / b)

    @staticmethod
    def from_network(bandwidth_mbps: float, latency_ms: float) -> "Link":
        """From the figures people quote: megabits per second, milliseconds."""
        return Link(latency_ms / 1e3, bandwidth_mbps * 1e6 / 8)

    def to_dict(self) -> dict[str, float]:
        mbps = None if math.isinf(self.bandwidth_bps) else self.bandwidth_bps * 8 / 1e6
        return {"bandwidth_mbps": _round(mbps), "latency_ms": _round(self.latency_s * 1e3)}


def _round(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.6g}")


@dataclass(frozen=True)
class Node:
    name: str
    platform: Platform
    address: str | None = None
    ray_resource: str | None = None
    # what Ray reports for the node (CPU, GPU, memory, object_store_memory, ...): detect only
    resources: dict[str, float] = field(default_factory=dict, compare=False, hash=False)
    # Ray object-store hand-off between two processes on this node (measured by detect_cluster);
    # a plan run on Ray pays it between stages on one node instead of the in-process hand-off
    local_link: Link | None = None

    @property
    def placement(self) -> dict[str, float]:
        """Ray resources that place a worker on this node."""
        if self.ray_resource is None and self.address:
            return {f"node:{self.address}": PLACEMENT_SHARE}
        return {self.ray_resource or node_resource(self.name): PLACEMENT_SHARE}


@dataclass(frozen=True)
class Cluster:
    name: str
    nodes: tuple[Node, ...]
    links: dict[tuple[str, str], Link] = field(default_factory=dict, compare=False, hash=False)
    default_link: Link | None = None
    description: str = ""
    source: str = ""

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise InputError(f"{self.source or self.name}: no node {name!r} "
                         f"(nodes: {', '.join(n.name for n in self.nodes)})")

    def link(self, src: str, dst: str) -> Link:
        link = self.links.get((src, dst)) or self.default_link
        if link is None:
            raise InputError(f"{self.source or self.name}: no link from node {src!r} to "
                             f"{dst!r} and no default_link")
        return link

    def elements(self, configs: Mapping[str, Any] | None = None) -> list[ProcessingElement]:
        """Every node's elements of one configuration (`configs[node]`: a label such as
        'cpu:1+1' or a PeConfig; default: each cluster as one element), named `node:element`
        and carrying their node's placement resource."""
        out = []
        for n in self.nodes:
            for e in n.platform.elements((configs or {}).get(n.name)):
                out.append(node_element(n, e))
        return out

    def to_dict(self) -> dict[str, Any]:
        nodes = []
        for n in self.nodes:
            d: dict[str, Any] = {"name": n.name, "platform": n.platform.to_dict()}
            if n.address:
                d["address"] = n.address
            if n.ray_resource:
                d["ray_resource"] = n.ray_resource
            if n.resources:
                d["resources"] = dict(n.resources)
            if n.local_link:
                d["local_link"] = n.local_link.to_dict()
            nodes.append(d)
        d = {"name": self.name}
        if self.description:
            d["description"] = self.description
        d["nodes"] = nodes
        d["links"] = [{"src": s, "dst": t, "directed": True, **l.to_dict()}
                      for (s, t), l in self.links.items()]
        if self.default_link:
            d["default_link"] = self.default_link.to_dict()
        return d


def node_element(node: Node, element: ProcessingElement) -> ProcessingElement:
    """`element` of `node` as a cluster element. Its cluster label gets the node prefix too, so
    elements of two nodes are never taken as interchangeable (their machines may differ)."""
    return replace(element, name=f"{node.name}{NODE_SEP}{element.name}",
                   cluster=f"{node.name}{NODE_SEP}{element.cluster}" if element.cluster else None,
                   resources={**element.resources, **node.placement})


# ---- YAML -------------------------------------------------------------------------------------
_TOP = {"name", "description", "nodes", "links", "default_link"}
_NODE = {"name", "platform", "address", "ray_resource", "resources", "local_link"}
_LINK = {"src", "dst", "directed", "bandwidth_mbps", "latency_ms"}


def _fail(source: str, where: str, msg: str) -> None:
    raise InputError(f"{source}: {where}: {msg}" if where else f"{source}: {msg}")


def _link(d: Any, source: str, where: str) -> Link:
    if not isinstance(d, Mapping):
        _fail(source, where, "expected a mapping with bandwidth_mbps and latency_ms")
    vals = {}
    for key in ("bandwidth_mbps", "latency_ms"):
        v = d.get(key)
        if key == "bandwidth_mbps" and v is None:
            vals[key] = math.inf  # latency only (e.g. measured with no size dependence)
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or (
                key == "bandwidth_mbps" and v == 0):
            kind = "positive" if key == "bandwidth_mbps" else "non-negative"
            _fail(source, f"{where}.{key}", f"expected a {kind} number, got {v!r}")
        vals[key] = float(v)
    return Link.from_network(vals["bandwidth_mbps"], vals["latency_ms"])


def _node_platform(v: Any, source: str, where: str, base: Path) -> Platform:

    if isinstance(v, Mapping):
        return platform_from_dict(v, f"{source}: {where}")
    if isinstance(v, str) and v.strip():
        p = Path(v) if Path(v).is_absolute() else base / v
        return load_platform(p if p.is_file() else v)
    _fail(source, where, f"expected a platform mapping, YAML path or bundled name, got {v!r}")


def cluster_from_dict(doc: Any, source: str = "<cluster>", base: Path | None = None) -> Cluster:
    """Validate a parsed cluster YAML document; errors name the file and the setting."""
    base = base or Path.cwd()
    if not isinstance(doc, Mapping):
        _fail(source, "", "expected a mapping with name, nodes, links")
    for k in doc:
        if k not in _TOP:
            _fail(source, str(k), f"unknown key (known: {', '.join(sorted(_TOP))})")
    name = doc.get("name")
    if not isinstance(name, str) or not name.strip():
        _fail(source, "name", f"expected a non-empty string, got {name!r}")
    raw_nodes = doc.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        _fail(source, "nodes", "expected a non-empty list of nodes")
    nodes: list[Node] = []
    for i, nd in enumerate(raw_nodes):
        w = f"nodes[{i}]"
        if not isinstance(nd, Mapping):
            _fail(source, w, "expected a mapping with name and platform")
        for k in nd:
            if k not in _NODE:
                _fail(source, f"{w}.{k}", f"unknown key (known: {', '.join(sorted(_NODE))})")
        nname = nd.get("name")
        if not isinstance(nname, str) or not NODE_NAME.fullmatch(nname):
            _fail(source, f"{w}.name", f"expected a name of letters, digits, _ . - "
                  f"(starting with a letter), got {nname!r}")
        if any(n.name == nname for n in nodes):
            _fail(source, f"{w}.name", f"node {nname!r} listed twice")
        if nd.get("platform") is None:
            _fail(source, f"{w}.platform", "missing")
        res = nd.get("resources") or {}
        if not isinstance(res, Mapping) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in res.values()):
            _fail(source, f"{w}.resources", "expected a mapping name -> amount")
        for key in ("address", "ray_resource"):
            if nd.get(key) is not None and not isinstance(nd[key], str):
                _fail(source, f"{w}.{key}", f"expected a string, got {nd[key]!r}")
        nodes.append(Node(nname, _node_platform(nd["platform"], source, f"{w}.platform", base),
                          nd.get("address"), nd.get("ray_resource"),
                          {str(k): float(v) for k, v in res.items()},
                          _link(nd["local_link"], source, f"{w}.local_link")
                          if nd.get("local_link") is not None else None))
    names = {n.name for n in nodes}
    links: dict[tuple[str, str], Link] = {}
    raw_links = doc.get("links") or []
    if not isinstance(raw_links, list):
        _fail(source, "links", "expected a list")
    for i, ld in enumerate(raw_links):
        w = f"links[{i}]"
        if not isinstance(ld, Mapping):
            _fail(source, w, "expected a mapping with src, dst, bandwidth_mbps, latency_ms")
        for k in ld:
            if k not in _LINK:
                _fail(source, f"{w}.{k}", f"unknown key (known: {', '.join(sorted(_LINK))})")
        for key in ("src", "dst"):
            if ld.get(key) not in names:
                _fail(source, f"{w}.{key}", f"no node {ld.get(key)!r} "
                      f"(nodes: {', '.join(sorted(names))})")
        if ld["src"] == ld["dst"]:
            _fail(source, w, "a link joins two different nodes (use local_link for one node)")
        link = _link(ld, source, w)
        pairs = [(ld["src"], ld["dst"])] + ([] if ld.get("directed") else [(ld["dst"], ld["src"])])
        for pair in pairs:
            if pair in links:
                _fail(source, w, f"link {pair[0]}->{pair[1]} given twice")
            links[pair] = link
    default = doc.get("default_link")
    cluster = Cluster(name, tuple(nodes), links,
                      _link(default, source, "default_link") if default is not None else None,
                      str(doc.get("description") or "").strip(), source)
    if cluster.default_link is None:
        for a in nodes:
            for b in nodes:
                if a.name != b.name and (a.name, b.name) not in links:
                    _fail(source, "links", f"no link from {a.name} to {b.name} and no "
                          "default_link")
    return cluster


def load_cluster(path: str | os.PathLike) -> Cluster:

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not valid YAML ({getattr(e, 'problem', e)})") from None
    return cluster_from_dict(doc, str(path), path.parent)


def dump_cluster(cluster: Cluster) -> str:

    return yaml.safe_dump(cluster.to_dict(), sort_keys=False, default_flow_style=None)
