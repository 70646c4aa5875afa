"""Cut a set of layers out of a CNN as a standalone ONNX model (a sub-network, one stage's work).

Not `onnx.utils.Extractor`: it deep-copies the whole model and re-runs shape inference on every
call. Here the normalised model (`graph.onnx`: sorted, named, shapes inferred) is indexed once per
graph and each sub-network copies only its own nodes, initializers and value infos, so cutting
densenet121 into 50 stages takes milliseconds each.

Inputs of a sub-network are the activation tensors its nodes read but do not produce (model
inputs included); outputs are the tensors it produces that a node outside reads, or that are
model outputs. Both are listed in a fixed order (first use, node order).
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Iterable

import numpy as np
import onnx
from google.protobuf.message import Message

from hetflow.errors import InputError, ModelError
from hetflow.model.graph import CnnGraph
from onnx import numpy_helper

_KEY_MAX = 200  # longer keys are hashed
CUT_CACHE_BYTES = 1 << 30  # weights held by an extractor's recent cuts, at most ...
# ... unless the model's weights are larger: then room for this many times them, enough for the
# whole model and each of its layers cut alone, which a profile cuts for every element (vgg19:
# 575 MB of weights; cut and serialized again per element, 12 of 20 s of an element's profile)
CUT_CACHE_MODELS = 2.2


def subnet_key(layers: Iterable[str]) -> str:
    """Stable key of a layer set: '+'.join(sorted names), or 'sha1:...' when that is long."""
    key = "+".join(sorted(set(layers)))
    if len(key) <= _KEY_MAX:
        return key
    return "sha1:" + hashlib.sha1(key.encode()).hexdigest()[:20]


@dataclass
class Subnet:
    name: str
    layers: tuple[str, ...]  # in topological order
    model: onnx.ModelProto
    inputs: list[str]
    outputs: list[str]
    # the serialized model, shared by the copies `extract` hands out of one cut
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def key(self) -> str:
        return subnet_key(self.layers)

    def border_infos(self) -> dict[str, onnx.ValueInfoProto]:
        """{name: value info} of the model's graph inputs and outputs (types and shapes)."""
        g = self.model.graph
        return {v.name: v for v in (*g.input, *g.output)}

    def serialized(self) -> bytes:
        """The model's bytes (cached: backends need them, and serialising is slow: vgg19's
        548 MB take 2.5-5 s)."""
        if "bytes" not in self._memo:
            self._memo["bytes"] = self.model.SerializeToString()
        return self._memo["bytes"]

    def weightless(self) -> tuple[bytes, list[str], list[np.ndarray]]:
        """(the model's bytes with its large initializers marked as external data, their names,
        their arrays), cached. ONNX Runtime takes such arrays from its session options
        (`add_external_initializers`), so a session is built without serialising the weights
        and parsing them back: serialising vgg19's layer cuts took 5.7 s of its 2-core profile.
        Initializers of dtypes numpy and ONNX Runtime share are moved; others stay inline."""
        if "weightless" not in self._memo:
            self._memo["weightless"] = weightless_model(self.model)
        return self._memo["weightless"]


class SubnetExtractor:
    """Index of one graph's ONNX model; `extract` cuts sub-networks out of it."""

    def __init__(self, graph: CnnGraph):
        model = getattr(graph, "onnx", None)
        if model is None:
            raise InputError(f"{graph.name}: the graph carries no ONNX model (read it with "
                             "hetflow.model.load_model) so no sub-network can be cut from it")
        self.graph = graph
        self.model = model
        g = model.graph
        self.node_pos = {n.name: i for i, n in enumerate(g.node)}
        self.nodes = list(g.node)
        self.inits = {t.name: t for t in g.initializer}
        self.vinfo = {v.name: v for v in (*g.input, *g.value_info, *g.output)}
        self.model_outputs = {o.name for o in g.output}
        self.consumers: dict[str, set[str]] = {}
        for n in g.node:
            for t in n.input:
                if t:
                    self.consumers.setdefault(t, set()).add(n.name)
        self.layer_nodes = {l.name: (l.nodes or (l.name,)) for l in graph.layers}
        # recent cuts, least recently used first, within `max_bytes()` of weights: a bench
        # cuts the same stage (the whole model above all) for every copy and run
        self.cuts: OrderedDict[tuple, tuple[Subnet, int]] = OrderedDict()
        self.lock = threading.Lock()
        self.weights = graph.total_param_bytes
        for lname, ns in self.layer_nodes.items():
            for n in ns:
                if n not in self.node_pos:
                    raise ModelError(f"{graph.name}: layer {lname!r} names ONNX node {n!r}, "
                                     "which the model does not have")

    def max_bytes(self) -> int:
        return max(CUT_CACHE_BYTES, int(CUT_CACHE_MODELS * self.weights))

    def extract(self, layers: Iterable[str], name: str | None = None,
                check_convex: bool = True) -> Subnet:
        wanted = list(dict.fromkeys(layers))
        key = (tuple(sorted(wanted)), check_convex)
        with self.lock:  # runners are built by several threads at once
            hit = self.cuts.get(key)
            if hit is None:
                sub = self._extract(wanted, check_convex)
                size = sum(self.graph.layer(l).param_bytes for l in sub.layers)
                self.cuts[key] = hit = (sub, size)
                while (sum(s for _, s in self.cuts.values()) > self.max_bytes()
                       and len(self.cuts) > 1):
                    self.cuts.popitem(last=False)
            self.cuts.move_to_end(key)
        sub = hit[0]
        return sub if name is None or name == sub.name else replace(sub, name=name)

    def _extract(self, wanted: list[str], check_convex: bool) -> Subnet:
        index = self.graph.layer_index
        if not wanted:
            raise InputError(f"{self.graph.name}: a sub-network needs at least one layer")
        for l in wanted:
            if l not in index:
                raise InputError(f"{self.graph.name}: sub-network names layer {l!r}, "
                                 "which the graph does not have")
        wanted.sort(key=index.__getitem__)
        if check_convex:
            self._check_convex(wanted)
        node_names = {n for l in wanted for n in self.layer_nodes[l]}
        nodes = sorted((self.nodes[self.node_pos[n]] for n in node_names),
                       key=lambda n: self.node_pos[n.name])
        produced = {t for n in nodes for t in n.output if t}

        inputs: dict[str, None] = {}
        inits: dict[str, None] = {}
        for n in nodes:
            for t in n.input:
                if not t or t in produced:
                    continue
                (inits if t in self.inits else inputs)[t] = None
        outputs = [t for n in nodes for t in n.output if t and (
            t in self.model_outputs or any(c not in node_names for c in self.consumers.get(t, ())))]
        if not outputs:  # a dead-end branch: expose what it computes
            outputs = [t for n in nodes for t in n.output if t and not self.consumers.get(t)]

        sub = onnx.ModelProto()
        sub.ir_version = self.model.ir_version
        sub.opset_import.extend(self.model.opset_import)
        # model-local functions (dynamo exports can call them): the nodes may call any
        sub.functions.extend(self.model.functions)
        sub.producer_name = "hetflow.subnet"
        g = sub.graph
        g.name = f"{self.graph.name}[{wanted[0]}..{wanted[-1]}]"
        g.node.extend(nodes)
        g.initializer.extend(self.inits[t] for t in inits)
        g.input.extend(self._value_info(t) for t in inputs)
        g.output.extend(self._value_info(t) for t in outputs)
        out_set = set(outputs)
        g.value_info.extend(self.vinfo[t] for t in produced if t not in out_set and t in self.vinfo)
        return Subnet(g.name, tuple(wanted), sub, list(inputs), outputs)

    def _value_info(self, tensor: str) -> onnx.ValueInfoProto:
        vi = self.vinfo.get(tensor)
        if vi is not None and vi.type.tensor_type.HasField("shape"):
            return vi
        info = self.graph.tensors.get(tensor)
        if info is None:
            raise ModelError(f"{self.graph.name}: tensor {tensor!r} has no inferred shape; "
                             "cannot make it a sub-network input or output")
        return onnx.helper.make_tensor_value_info(
            tensor, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(info.dtype)),
            list(info.shape))

    def _check_convex(self, layers: list[str]) -> None:
        """A layer outside the set on a path between two of its layers would make the stage
        wait on itself: refuse it."""
        inside = set(layers)
        index = self.graph.layer_index
        last = max(index[l] for l in layers)
        succs = self.graph.succs
        frontier = [s for l in layers for s in succs[l] if s not in inside and index[s] < last]
        seen = set(frontier)
        while frontier:
            cur = frontier.pop()
            for s in succs[cur]:
                if s in inside:
                    raise InputError(
                        f"{self.graph.name}: sub-network {layers[0]}..{layers[-1]} is not convex: "
                        f"layer {cur!r} is outside it but on a path between two of its layers")
                if s not in seen and index[s] < last:
                    seen.add(s)
                    frontier.append(s)


def extractor_for(graph: CnnGraph) -> SubnetExtractor:
    """The graph's extractor, built on first use and kept on the graph (like a cached_property,
    so it lives and dies with the graph)."""
    ex = vars(graph).get("_subnet_extractor")
    if ex is None or ex.model is not getattr(graph, "onnx", None):
        ex = vars(graph)["_subnet_extractor"] = SubnetExtractor(graph)
    return ex


_EXTERNAL_MIN_BYTES = 1024  # smaller initializers (shapes, axes, scalars) stay in the model
_SHARED_DTYPES = {np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.uint8,
                                        np.int16, np.uint16, np.int32, np.uint32, np.int64,
                                        np.uint64, np.bool_)}


def _copy_fields(dst, src, skip: str) -> None:
    """Every set field of protobuf message `src` but `skip` into `dst` (no copy of `skip`)."""
    for f, value in src.ListFields():
        if f.name == skip:
            continue
        if isinstance(value, Message):
            getattr(dst, f.name).CopyFrom(value)
        elif isinstance(value, (str, bytes, int, float, bool)):
            setattr(dst, f.name, value)
        else:  # a repeated field
            getattr(dst, f.name).extend(value)


def weightless_model(model: onnx.ModelProto) -> tuple[bytes, list[str], list[np.ndarray]]:
    """`model`'s bytes with its large initializers as external data, their names and arrays
    (what `Subnet.weightless` caches; see there)."""

    g = model.graph
    skel = onnx.ModelProto()
    _copy_fields(skel, model, skip="graph")
    _copy_fields(skel.graph, g, skip="initializer")
    names, arrays = [], []
    for t in g.initializer:
        arr = None
        if t.data_location != onnx.TensorProto.EXTERNAL:
            nbytes = len(t.raw_data) if t.HasField("raw_data") else None
            if nbytes is None or nbytes >= _EXTERNAL_MIN_BYTES:
                arr = numpy_helper.to_array(t)
                if arr.dtype not in _SHARED_DTYPES or arr.nbytes < _EXTERNAL_MIN_BYTES:
                    arr = None
        if arr is None:
            skel.graph.initializer.append(t)
            continue
        stub = skel.graph.initializer.add(name=t.name, data_type=t.data_type, dims=t.dims,
                                          data_location=onnx.TensorProto.EXTERNAL)
        for k, v in (("location", "hetflow-weights"), ("offset", "0"),
                     ("length", str(arr.nbytes))):
            stub.external_data.add(key=k, value=v)
        names.append(t.name)
        arrays.append(np.ascontiguousarray(arr))
    return skel.SerializeToString(), names, arrays


def extract_subnet(graph: CnnGraph, layers: Iterable[str], name: str | None = None,
                   check_convex: bool = True) -> Subnet:
    """The layers `layers` of `graph` as a standalone ONNX model (see module docstring)."""
    return extractor_for(graph).extract(layers, name, check_convex)
