"""The CNN graph read from ONNX: layers, the tensors between them, shapes and costs.

Plain data: a `CnnGraph` is serialisable with `to_dict`/`from_dict` and carries the hash of the
model it came from, so profiles and plans made for another model are detected.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import networkx as nx

DTYPE_BYTES = {
    "float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4,
    "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
}


@dataclass(frozen=True)
class TensorInfo:
    """A tensor flowing along an edge of the CNN (or a model input/output)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.elements * DTYPE_BYTES.get(self.dtype, 4)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "TensorInfo":
        return TensorInfo(d["name"], tuple(int(s) for s in d["shape"]), d.get("dtype", "float32"))


@dataclass(frozen=True)
class Layer:
    """One ONNX node (or a fused chain of nodes, see `nodes`).

    `inputs`/`outputs` name activation tensors only (weights are in `param_bytes`).
    `flops` is None where hetflow has no formula for the operator.
    """

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    flops: int | None = 0
    param_bytes: int = 0
    nodes: tuple[str, ...] = ()  # ONNX node names this layer stands for (several when fused)
    attrs: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "op_type": self.op_type, "inputs": list(self.inputs),
            "outputs": list(self.outputs), "flops": self.flops, "param_bytes": self.param_bytes,
            "nodes": list(self.nodes), "attrs": self.attrs,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Layer":
        return Layer(d["name"], d["op_type"], tuple(d["inputs"]), tuple(d["outputs"]),
                     d.get("flops"), d.get("param_bytes", 0), tuple(d.get("nodes", ())),
                     d.get("attrs", {}))


@dataclass(frozen=True)
class Edge:
    """Data dependency: `src` layer produces `tensor`, which `dst` layer consumes."""

    src: str
    dst: str
    tensor: str


@dataclass
class CnnGraph:
    """A DAG of layers in topological order, with every activation tensor's shape."""

    name: str
    layers: list[Layer]
    tensors: dict[str, TensorInfo]
    inputs: list[str]  # model input tensor names
    outputs: list[str]  # model output tensor names
    model_hash: str = ""  # sha256 of the ONNX bytes it was read from
    source: str = ""  # path it was read from, for messages

    # ---- derived views (cached; the graph is not mutated after construction) ----
    @cached_property
    def layer_index(self) -> dict[str, int]:
        return {l.name: i for i, l in enumerate(self.layers)}

    @cached_property
    def producer(self) -> dict[str, str]:
        """tensor name -> name of the layer that produces it."""
        return {t: l.name for l in self.layers for t in l.outputs}

    @cached_property
    def consumers(self) -> dict[str, list[str]]:
        """tensor name -> names of the layers that consume it (in topological order)."""
        out: dict[str, list[str]] = {}
        for l in self.layers:
            for t in dict.fromkeys(l.inputs):
                out.setdefault(t, []).append(l.name)
        return out

    @cached_property
    def edges(self) -> list[Edge]:
        prod = self.producer
        return [Edge(prod[t], l.name, t) for l in self.layers for t in dict.fromkeys(l.inputs)
                if t in prod]

    @cached_property
    def preds(self) -> dict[str, list[str]]:
        p: dict[str, list[str]] = {l.name: [] for l in self.layers}
        for e in self.edges:
            if e.src not in p[e.dst]:
                p[e.dst].append(e.src)
        return p

    @cached_property
    def succs(self) -> dict[str, list[str]]:
        s: dict[str, list[str]] = {l.name: [] for l in self.layers}
        for e in self.edges:
            if e.dst not in s[e.src]:
                s[e.src].append(e.dst)
        return s

    def layer(self, name: str) -> Layer:
        return self.layers[self.layer_index[name]]

    @property
    def total_flops(self) -> int:
        return sum(l.flops or 0 for l in self.layers)

    @property
    def total_param_bytes(self) -> int:
        return sum(l.param_bytes for l in self.layers)

    def to_networkx(self):

        g = nx.DiGraph()
        for l in self.layers:
            g.add_node(l.name, op_type=l.op_type)
        for e in self.edges:
            g.add_edge(e.src, e.dst, tensor=e.tensor)
        return g

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "model_hash": self.model_hash, "source": self.source,
            "inputs": self.inputs, "outputs": self.outputs,
            "layers": [l.to_dict() for l in self.layers],
            "tensors": [t.to_dict() for t in self.tensors.values()],
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "CnnGraph":
        tensors = {t["name"]: TensorInfo.from_dict(t) for t in d["tensors"]}
        return CnnGraph(d["name"], [Layer.from_dict(l) for l in d["layers"]], tensors,
                        list(d["inputs"]), list(d["outputs"]), d.get("model_hash", ""),
                        d.get("source", ""))
