"""Read an ONNX file into a `CnnGraph` (one layer per node, or fused Conv+BN+activation chains).

The model is normalised first, so every later step (sub-network extraction, backends) can rely
on it: nodes named and topologically sorted, Constant nodes turned into initializers, the batch
dimension fixed to 1, shapes inferred. The normalised proto travels with the graph as
`graph.onnx` (not serialised).
"""
from __future__ import annotations

import hashlib
import heapq
import logging
import math
import os
from collections import Counter
from pathlib import Path

import onnx

from hetflow.errors import InputError, ModelError

from hetflow.model.flops import node_flops
from hetflow.model.graph import CnnGraph, Layer, TensorInfo
import numpy as np
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

log = logging.getLogger("hetflow.model")

CONTROL_FLOW = {"If", "Loop", "Scan"}
ACTIVATIONS = {"Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "Elu",
               "Selu", "PRelu"}
_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64",
                9: "bool", 10: "float16", 11: "float64", 16: "bfloat16"}

notices: list[str] = []  # human-readable notices of the last load (e.g. batch fixed to 1)
_said: set[str] = set()  # notices already written to stderr by this process


def parse_input_shapes(specs: list[str] | None) -> dict[str, tuple[int, ...]]:
    """Parse ['input=1x3x224x224', ...] (or 1,3,224,224) as given on the command line."""
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs or []:
        name, sep, dims = spec.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = tuple(int(d) for d in dims.lower().replace(",", "x").split("x"))
            if any(d <= 0 for d in out[name]):
                raise ValueError
        except ValueError:
            raise InputError(f"--input-shape {spec!r}: expected NAME=DxDx... or NAME=D,D,..., "
                             "e.g. input=1x3x224x224")
    return out


def load_model(path: str | os.PathLike, input_shapes: dict[str, tuple[int, ...]] | None = None,
               fuse: bool = False, name: str | None = None) -> CnnGraph:
    """Read and normalise an ONNX CNN. Bad input raises ModelError naming the file and node."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not an ONNX file")
    data = path.read_bytes()
    try:
        model = onnx.load_from_string(data)
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
            onnx.load_external_data_for_model(model, str(path.parent))
    except Exception as e:  # protobuf DecodeError and friends: the file is not (a whole) ONNX model
        raise ModelError(f"{path}: not a readable ONNX model ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else 'truncated or corrupt'})") from None
    if not model.graph.node:
        raise ModelError(f"{path}: not a readable ONNX model (the graph has no nodes; truncated?)")
    model = normalise(model, str(path), input_shapes or {})
    graph = to_cnn_graph(model, name or path.stem, fuse)
    graph.model_hash = hashlib.sha256(data).hexdigest()
    graph.source = str(path)
    return graph


def normalise(model: onnx.ModelProto, src: str, input_shapes: dict[str, tuple[int, ...]]
              ) -> onnx.ModelProto:
    g = model.graph
    for n in g.node:
        if n.op_type in CONTROL_FLOW:
            raise ModelError(f"{src}: node {n.name or n.output[0]!r} is control flow ({n.op_type});"
                             " hetflow handles static dataflow CNNs only")
    _name_nodes(g)
    _constants_to_initializers(g)
    _toposort(g, src)
    _fix_input_shapes(g, src, input_shapes)
    model = _infer(model, src)
    # ONNX's data propagation stops at Div, Where, Equal, ConstantOfShape...: exporters compute
    # Slice bounds (shufflenet's channel split) and Expand shapes (ViT's class token) that way.
    # With static input shapes those subgraphs are constants: fold them and infer again, until
    # nothing more folds (one round per chain of Shape -> ... -> shape-consuming node).
    while _fold_constants(model):
        model = _infer(model, src)
    return model


_INTEGER = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}


def _infer(model: onnx.ModelProto, src: str) -> onnx.ModelProto:
    """ONNX shape inference (with data propagation) into `model`'s value infos and outputs.

    It runs on a skeleton without the weights' bytes: large initializers become graph inputs of
    their type and shape (inference reads values only of small ones), so a 350 MB ViT-B is not
    serialised and copied once per round."""
    g = model.graph
    skel = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import,
                           functions=model.functions)
    sg = skel.graph
    sg.node.extend(g.node)
    sg.input.extend(g.input)
    sg.output.extend(g.output)
    sg.value_info.extend(g.value_info)
    listed = {i.name for i in g.input}
    for t in g.initializer:
        if t.data_type in _INTEGER or math.prod(t.dims) <= 64:  # shapes, axes, scalars
            sg.initializer.append(t)
        elif t.name not in listed:
            sg.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    try:
        inferred = onnx.shape_inference.infer_shapes(skel, strict_mode=True, data_prop=True)
    except Exception as e:
        raise ModelError(f"{src}: ONNX shape inference failed: {str(e).splitlines()[0]}") from None
    del g.value_info[:]
    g.value_info.extend(inferred.graph.value_info)
    del g.output[:]
    g.output.extend(inferred.graph.output)
    return model


_NOT_FOLDED = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
               "Multinomial", "Bernoulli"}


def _static_shape(vinfo: dict[str, onnx.ValueInfoProto], t: str) -> list[int] | None:
    vi = vinfo.get(t)
    if vi is None or not vi.type.tensor_type.HasField("shape"):
        return None
    dims = vi.type.tensor_type.shape.dim
    return [d.dim_value for d in dims] if all(d.HasField("dim_value") for d in dims) else None


def _shape_value(n: onnx.NodeProto, shape: list[int]):

    if n.op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), np.int64)
    a = {x.name: x.i for x in n.attribute}
    start, end = a.get("start", 0), a.get("end", len(shape))
    return np.array(shape[start:end], np.int64)  # Python slicing clamps as ONNX does


def _fold_constants(model: onnx.ModelProto) -> bool:
    """Constant folding: Shape/Size of statically shaped tensors, and deterministic nodes whose
    inputs are all initializers, become initializers. Also what makes weights plain initializers
    again where exporters route them through nodes: torch's Identity nodes for deduplicated
    weights (efficientnet), a Cast or Transpose of a weight. An Identity of an initializer is
    an alias (its readers read the initializer: no copy of the weight); a node whose output is
    much larger than its inputs (Expand, ConstantOfShape, Tile) stays a node, so folding never
    inflates the model. Returns whether anything was folded."""

    g = model.graph
    vinfo = {v.name: v for v in (*g.input, *g.value_info, *g.output)}
    consts = {t.name: t for t in g.initializer}
    values: dict[str, np.ndarray] = {}
    alias: dict[str, str] = {}

    def value(t: str) -> np.ndarray:
        if t not in values:
            values[t] = numpy_helper.to_array(consts[t])
        return values[t]

    graph_outputs = {o.name for o in g.output}
    keep, folded = [], []
    for n in g.node:
        n.input[:] = [alias.get(t, t) for t in n.input]
        outs = None
        if n.domain not in ("", "ai.onnx") or n.op_type in _NOT_FOLDED or \
                any(o in graph_outputs for o in n.output):
            pass
        elif n.op_type == "Identity" and n.input[0] in consts:
            alias[n.output[0]] = n.input[0]
            folded.append(n)
            continue
        elif n.op_type in ("Shape", "Size"):
            shape = (list(consts[n.input[0]].dims) if n.input[0] in consts  # of a folded value
                     else _static_shape(vinfo, n.input[0]))
            if shape is not None:
                outs = [_shape_value(n, shape)]
        elif all(not t or t in consts for t in n.input):
            # a one-node model of the model's opsets: operators changed meaning across
            # versions (Unsqueeze's axes, Slice's bounds), and a bare node gets the newest
            one = onnx.helper.make_model(onnx.helper.make_graph(
                [n], "fold", [onnx.helper.make_tensor_value_info(t, consts[t].data_type, None)
                              for t in dict.fromkeys(n.input) if t],
                [onnx.helper.make_empty_tensor_value_info(o) for o in n.output if o]),
                opset_imports=model.opset_import, ir_version=model.ir_version)
            try:
                outs = [np.asarray(o) for o in ReferenceEvaluator(one).run(
                    None, {t: value(t) for t in n.input if t})]
            except Exception:  # an operator the evaluator lacks: the node stays, as it was
                outs = None
            size_in = sum(value(t).size for t in n.input if t)
            if outs is not None and sum(o.size for o in outs) > max(2 * size_in, 4096):
                outs = None
        if outs is None:
            keep.append(n)
            continue
        folded.append(n)
        for name, arr in zip([o for o in n.output if o], outs):
            values[name] = arr
            consts[name] = numpy_helper.from_array(arr, name)
            g.initializer.append(consts[name])
    if not folded:
        return False
    del g.node[:]
    g.node.extend(keep)
    # initializers that only the folded nodes read are dead now
    used = {t for n in keep for t in n.input} | graph_outputs
    live = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(live)
    inputs = [i for i in g.input if i.name in used or i.name not in consts]
    del g.input[:]
    g.input.extend(inputs)
    folded_outputs = {o for n in folded for o in n.output}
    live_vi = [v for v in g.value_info if v.name not in folded_outputs]
    del g.value_info[:]
    g.value_info.extend(live_vi)
    return True


def _name_nodes(g: onnx.GraphProto) -> None:
    seen: Counter[str] = Counter()
    for i, n in enumerate(g.node):
        base = n.name or f"{n.op_type}_{i}"
        seen[base] += 1
        n.name = base if seen[base] == 1 else f"{base}__{seen[base]}"


def _constants_to_initializers(g: onnx.GraphProto) -> None:
    keep = []
    for n in g.node:
        if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value":
            t = onnx.TensorProto()
            t.CopyFrom(n.attribute[0].t)
            t.name = n.output[0]
            g.initializer.append(t)
        else:
            keep.append(n)
    if len(keep) != len(g.node):
        del g.node[:]
        g.node.extend(keep)


def _toposort(g: onnx.GraphProto, src: str) -> None:
    produced_by = {o: i for i, n in enumerate(g.node) for o in n.output if o}
    indeg = [0] * len(g.node)
    users: dict[int, list[int]] = {}
    for i, n in enumerate(g.node):
        for t in set(n.input):
            j = produced_by.get(t)
            if j is not None:
                indeg[i] += 1
                users.setdefault(j, []).append(i)
    # Kahn's algorithm with a heap on the original index: an already sorted graph keeps its order
    ready = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for k in users.get(i, []):
            indeg[k] -= 1
            if indeg[k] == 0:
                heapq.heappush(ready, k)
    if len(order) != len(g.node):
        stuck = [g.node[i].name for i, d in enumerate(indeg) if d > 0][:5]
        raise ModelError(f"{src}: the graph has a cycle through nodes {', '.join(stuck)}")
    nodes = [g.node[i] for i in order]
    del g.node[:]
    g.node.extend(nodes)


def _fix_input_shapes(g: onnx.GraphProto, src: str, given: dict[str, tuple[int, ...]]) -> None:
    inits = {t.name for t in g.initializer}
    real_inputs = [i for i in g.input if i.name not in inits]
    unknown = set(given) - {i.name for i in real_inputs}
    if unknown:
        raise InputError(f"{src}: --input-shape names {sorted(unknown)}, but the model's inputs "
                         f"are {[i.name for i in real_inputs]}")
    for inp in real_inputs:
        dims = inp.type.tensor_type.shape.dim
        if inp.name in given:
            shape = given[inp.name]
            if dims and len(dims) != len(shape):
                raise InputError(f"{src}: --input-shape {inp.name} has {len(shape)} dimensions, the "
                                 f"model's input has {len(dims)}")
            del dims[:]
            for d in shape:
                dims.add().dim_value = d
            continue
        for k, d in enumerate(dims):
            if d.dim_value > 0:
                continue
            if k == 0:
                # a stream of frames is fed one frame at a time: batch 1 is what such a
                # model means here, said once per process (a command loads a model often)
                shown = ",".join(["1"] + [str(x.dim_value) if x.dim_value > 0 else
                                          x.dim_param or "?" for x in dims[1:]])
                notices.append(f"{src}: input {inp.name!r} has a symbolic batch dimension "
                               f"{d.dim_param or '?'!r}: taken as batch 1 (another size: "
                               f"--input-shape {inp.name}={shown.replace('1', 'B', 1)})")
                if notices[-1] not in _said:
                    _said.add(notices[-1])
                    log.warning(notices[-1])
                d.Clear()
                d.dim_value = 1
            else:
                # the fix, spelled with what the model knows: input=1,3,h,w
                known = ",".join(str(x.dim_value) if x.dim_value > 0 else x.dim_param or "?"
                                 for x in dims)
                raise InputError(
                    f"{src}: input {inp.name!r} has dynamic dimension {k} "
                    f"({d.dim_param or '?'}); give its shape with --input-shape "
                    f"{inp.name}={known} (your sizes, e.g. {inp.name}=1,3,224,224)")


def _tensor_infos(model: onnx.ModelProto) -> dict[str, TensorInfo]:
    out = {}
    g = model.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        if any(d < 0 for d in dims):
            continue
        out[vi.name] = TensorInfo(vi.name, tuple(dims), _ONNX_DTYPES.get(tt.elem_type, "float32"))
    return out


def to_cnn_graph(model: onnx.ModelProto, name: str, fuse: bool = False) -> CnnGraph:
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    weight_shapes = {n: tuple(t.dims) for n, t in inits.items()}
    tensors = _tensor_infos(model)
    inputs = [i.name for i in g.input if i.name not in inits]
    outputs = [o.name for o in g.output]
    layers: list[Layer] = []
    for n in g.node:
        acts_in = tuple(dict.fromkeys(t for t in n.input if t and t not in inits))
        acts_out = tuple(t for t in n.output if t)
        for t in acts_in + acts_out:
            if t not in tensors:
                # the inputs are static here (normalise refuses dynamic ones), so the shape
                # depends on values only a run knows (NonZero, a Resize by a computed size...)
                given = ", ".join(f"{i}={'x'.join(map(str, tensors[i].shape))}"
                                  for i in inputs if i in tensors)
                raise ModelError(f"{name}: node {n.name!r} ({n.op_type}): the shape of tensor "
                                 f"{t!r} could not be inferred from the input shapes ({given}): "
                                 "it depends on values computed at run time, which hetflow's "
                                 "static dataflow cannot handle")
        param = sum(_nbytes(inits[t]) for t in n.input if t in inits)
        flops = node_flops(n, tensors, weight_shapes)
        attrs = {a.name: _plain(onnx.helper.get_attribute_value(a)) for a in n.attribute
                 if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS,
                               onnx.AttributeProto.FLOAT, onnx.AttributeProto.STRING)}
        layers.append(Layer(n.name, n.op_type, acts_in, acts_out, flops, param, (n.name,), attrs))
    graph = CnnGraph(name, layers, tensors, inputs, outputs)
    if fuse:
        graph = fuse_chains(graph)
    graph.onnx = model  # type: ignore[attr-defined]  # normalised proto, not serialised
    return graph


def _nbytes(t: onnx.TensorProto) -> int:

    n = int(np.prod(t.dims, dtype=np.int64)) if t.dims else 1
    return n * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize


def _plain(v):
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def fuse_chains(graph: CnnGraph) -> CnnGraph:
    """Fuse Conv(+BatchNormalization)(+activation) and MatMul+Add(bias)(+activation) chains
    into one layer each.

    A chain link is fused only where the intermediate tensor has exactly one consumer and is
    not a model output, so the fused layer has the same external edges as the chain.
    """
    consumers = graph.consumers
    outputs = set(graph.outputs)
    by_name = {l.name: l for l in graph.layers}

    def sole_consumer(t: str) -> Layer | None:
        c = consumers.get(t, [])
        return by_name[c[0]] if len(c) == 1 and t not in outputs else None

    absorbed: set[str] = set()
    fused: list[Layer] = []
    for l in graph.layers:
        if l.name in absorbed:
            continue
        chain = [l]
        if l.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
            nxt = sole_consumer(l.outputs[0]) if len(l.outputs) == 1 else None
            if l.op_type == "MatMul" and nxt is not None and nxt.op_type == "Add" and \
                    len(nxt.inputs) == 1 and nxt.param_bytes:
                # a Linear layer's bias, as exporters write it (transformers): MatMul + Add(weight)
                chain.append(nxt)
                nxt = sole_consumer(nxt.outputs[0])
            if nxt is not None and nxt.op_type == "BatchNormalization":
                chain.append(nxt)
                nxt = sole_consumer(nxt.outputs[0])
            if nxt is not None and nxt.op_type in ACTIVATIONS and len(nxt.inputs) == 1:
                chain.append(nxt)
        if len(chain) == 1:
            fused.append(l)
            continue
        absorbed.update(c.name for c in chain[1:])
        flops = [c.flops for c in chain]
        fused.append(Layer(
            name=l.name, op_type="+".join(c.op_type for c in chain), inputs=l.inputs,
            outputs=chain[-1].outputs, flops=None if None in flops else sum(flops),
            param_bytes=sum(c.param_bytes for c in chain),
            nodes=tuple(n for c in chain for n in c.nodes), attrs=dict(l.attrs)))
    return CnnGraph(graph.name, fused, graph.tensors, graph.inputs, graph.outputs,
                    graph.model_hash, graph.source)
