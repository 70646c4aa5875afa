"""Layer splits: one layer computed as several parts, each over a slice of its output channels.

A split rewrites the ONNX model: the layer's nodes (a Conv, Gemm or MatMul, and the
BatchNormalization, bias Add and activation fused after it) are replaced by k copies, copy i
computing output channels [o_i, o_i+1) with its weights sliced, and a Concat that rebuilds the
layer's output under its own name. The result is read back as an ordinary layer graph, so the
dataflow model, the profiler, the search and every engine see the parts as layers like any
other: a part mapped to one element and a part mapped to another run at once, and the Concat
is a layer of its own. Outputs are those of the unsplit model (the same arithmetic, per
channel), up to the float rounding of the convolution algorithm each part's shape selects.

Channels are the output axis 1 of a Conv and the last axis of a Gemm/MatMul. A grouped
convolution is refused (its channels are tied to input channels).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from hetflow.errors import InputError

from .graph import CnnGraph

SPLITTABLE = ("Conv", "Gemm", "MatMul")


@dataclass(frozen=True)
class LayerSplit:
    """Layer `layer` computed as parts of `channels[i]` output channels each, in order."""

    layer: str
    channels: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "channels": list(self.channels)}


def part_name(layer: str, i: int) -> str:
    """The name of part i of `layer` in the split graph (the fused layer takes its first
    node's name, which is the layer's own)."""
    return f"{layer}/part{i}"


def concat_name(layer: str) -> str:
    return f"{layer}/concat"


def output_channels(graph: CnnGraph, layer: str) -> int:
    lay = graph.layer(layer)
    shape = graph.tensors[lay.outputs[0]].shape
    axis = 1 if lay.op_type.split("+")[0] == "Conv" else len(shape) - 1
    return int(shape[axis])


def channels_for(fractions: Sequence[float], total: int) -> tuple[int, ...]:
    """Whole channels per part for `fractions` (largest remainder), each part at least one."""
    if total < len(fractions):
        raise InputError(f"cannot split {total} channels into {len(fractions)} parts")
    f = np.asarray(fractions, float)
    if (f < 0).any() or f.sum() <= 0:
        raise InputError(f"split fractions must be >= 0 and not all 0; got {list(fractions)}")
    raw = f / f.sum() * total
    counts = np.maximum(1, np.floor(raw)).astype(int)
    while counts.sum() > total:  # the minimum of 1 overshot: take from the largest
        counts[int(np.argmax(counts))] -= 1
    for i in np.argsort(-(raw - np.floor(raw)))[:total - counts.sum()]:
        counts[i] += 1
    return tuple(int(c) for c in counts)


def check_split(graph: CnnGraph, split: LayerSplit) -> None:
    """InputError naming the layer unless `split` can be applied to `graph`."""
    try:
        lay = graph.layer(split.layer)
    except (KeyError, ValueError):
        raise InputError(f"split: the model has no layer {split.layer!r}") from None
    head = lay.op_type.split("+")[0]
    if head not in SPLITTABLE:
        raise InputError(f"split: layer {split.layer!r} is a {lay.op_type}; only "
                         f"{', '.join(SPLITTABLE)} layers (with what is fused after them) split")
    if head == "Conv" and int(lay.attrs.get("group", 1) or 1) != 1:
        raise InputError(f"split: layer {split.layer!r} is a grouped convolution "
                         f"(group={lay.attrs['group']}); its output channels cannot be split "
                         "apart from its input channels")
    total = output_channels(graph, split.layer)
    if len(split.channels) < 2 or any(c < 1 for c in split.channels) or \
            sum(split.channels) != total:
        raise InputError(f"split: layer {split.layer!r} has {total} output channels; a split "
                         f"needs two or more parts of at least one channel summing to it, got "
                         f"{list(split.channels)}")


def _slice(t: onnx.TensorProto, axis: int, lo: int, hi: int, name: str) -> onnx.TensorProto:
    a = numpy_helper.to_array(t)
    return numpy_helper.from_array(np.ascontiguousarray(np.take(a, range(lo, hi), axis=axis)),
                                   name)


class _Splitter:
    def __init__(self, model: onnx.ModelProto):
        self.model = onnx.ModelProto()
        self.model.CopyFrom(model)
        g = self.model.graph
        self.inits = {t.name: t for t in g.initializer}
        self.uses: dict[str, int] = {}
        for n in g.node:
            for t in n.input:
                self.uses[t] = self.uses.get(t, 0) + 1

    def split(self, graph: CnnGraph, split: LayerSplit) -> None:
        g = self.model.graph
        lay = graph.layer(split.layer)
        pos = {n.name: i for i, n in enumerate(g.node)}
        chain = [g.node[pos[n]] for n in (lay.nodes or (lay.name,))]
        out = lay.outputs[0]
        rank = len(graph.tensors[out].shape)
        axis = 1 if chain[0].op_type == "Conv" else rank - 1
        bounds = np.concatenate([[0], np.cumsum(split.channels)])
        total = int(bounds[-1])
        inner = {t for n in chain for t in n.output}  # tensors made inside the chain
        new_nodes, new_inits, part_outs = [], [], []
        for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            lo, hi = int(lo), int(hi)
            for k, node in enumerate(chain):
                nn = onnx.NodeProto()
                nn.CopyFrom(node)
                nn.name = part_name(split.layer, i) if k == 0 else f"{node.name}/part{i}"
                del nn.input[:]
                for j, t in enumerate(node.input):
                    if t in inner:
                        nn.input.append(f"{t}/part{i}")
                    elif t in self.inits:
                        ax = self._weight_axis(node, j, self.inits[t], rank, axis, total,
                                               split.layer)
                        if ax is None:
                            nn.input.append(t)
                        else:
                            name = f"{t}/part{i}"
                            new_inits.append(_slice(self.inits[t], ax, lo, hi, name))
                            nn.input.append(name)
                    else:
                        nn.input.append(t)
                del nn.output[:]
                nn.output.extend(f"{t}/part{i}" for t in node.output)
                new_nodes.append(nn)
            part_outs.append(f"{out}/part{i}")
        new_nodes.append(onnx.helper.make_node("Concat", part_outs, [out], axis=axis,
                                               name=concat_name(split.layer)))
        last = max(pos[n.name] for n in chain)
        kept = [n for n in g.node if n.name not in {c.name for c in chain}]
        at = sum(1 for n in g.node[:last] if n.name not in {c.name for c in chain})
        del g.node[:]
        g.node.extend(kept[:at] + new_nodes + kept[at:])
        for node in chain:
            for t in node.input:
                self.uses[t] -= 1
        g.initializer.extend(new_inits)
        unused = {t for t, n in self.uses.items() if n <= 0 and t in self.inits}
        keep = [t for t in g.initializer if t.name not in unused]
        del g.initializer[:]
        g.initializer.extend(keep)
        self.inits = {t.name: t for t in g.initializer}
        drop = inner | {out}
        keep_vi = [v for v in g.value_info if v.name not in drop]
        del g.value_info[:]
        g.value_info.extend(keep_vi)

    @staticmethod
    def _weight_axis(node: onnx.NodeProto, j: int, t: onnx.TensorProto, rank: int, axis: int,
                     total: int, layer: str) -> int | None:
        """The axis of initializer input j of `node` that runs along the output channels, or
        None where the whole initializer serves every part (a scalar, a broadcast 1)."""
        dims = list(t.dims)
        if node.op_type == "Conv":
            return 0 if j in (1, 2) else None
        if node.op_type == "Gemm" and j == 1:
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            return 0 if trans_b else 1
        if node.op_type == "MatMul" and j == 1:
            return len(dims) - 1
        if node.op_type in ("Gemm", "MatMul") and j == 0:
            raise InputError(f"split: layer {layer!r}: its {node.op_type} multiplies a weight "
                             "from the left; only a weight on the right splits by columns")
        # per-channel parameters of what follows (BatchNormalization, bias Add, PRelu slope):
        # broadcast against the output, so the channel axis is counted from the right
        if node.op_type == "BatchNormalization":
            return 0
        ax = axis - (rank - len(dims))
        if ax < 0 or not dims or dims[ax] == 1:
            return None
        if dims[ax] == total:
            return ax
        raise InputError(f"split: layer {layer!r}: node {node.name!r} ({node.op_type}) has a "
                         f"parameter of shape {dims} that does not follow the output channels")


def split_model(model: onnx.ModelProto, graph: CnnGraph,
                splits: Iterable[LayerSplit]) -> onnx.ModelProto:
    """`model` (the graph's normalised ONNX model) with `splits` applied."""
    sp = _Splitter(model)
    for s in splits:
        check_split(graph, s)
        sp.split(graph, s)
    return onnx.shape_inference.infer_shapes(sp.model)


def apply_splits(graph: CnnGraph, splits: Sequence[LayerSplit], fuse: bool) -> CnnGraph:
    """The layer graph of `graph`'s model with `splits` applied (same name, hash and source:
    a plan names the model it was made for and the splits it applies to it)."""
    from .reader import to_cnn_graph

    if not splits:
        return graph
    model = getattr(graph, "onnx", None)
    if model is None:
        raise InputError(f"{graph.name}: the graph carries no ONNX model to split")
    names = [s.layer for s in splits]
    if len(set(names)) != len(names):
        raise InputError(f"split: a layer is split twice ({', '.join(names)})")
    out = to_cnn_graph(split_model(model, graph, splits), graph.name, fuse)
    out.model_hash, out.source = graph.model_hash, graph.source
    # outputs of a split graph are checked against the model as it was before the split
    out.reference_onnx = getattr(graph, "reference_onnx", None) or model  # type: ignore[attr-defined]
    return out


__all__ = ["LayerSplit", "apply_splits", "split_model", "check_split", "channels_for",
           "output_channels", "part_name", "concat_name", "SPLITTABLE"]
