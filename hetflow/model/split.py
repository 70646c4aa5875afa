"""Layer splits: one layer computed as several parts, each over a slice of its output channels
or (a 2-D convolution) of its output rows.

A split rewrites the ONNX model: the layer's nodes (a Conv, Gemm or MatMul, and the
BatchNormalization, bias Add and activation fused after it) are replaced by k copies and a
Concat that rebuilds the layer's output under its own name.

- By channels, copy i computes output channels [o_i, o_i+1) with its weights sliced.
  Channels are the output axis 1 of a Conv and the last axis of a Gemm/MatMul. A grouped
  convolution is refused (its channels are tied to input channels).
- By rows, copy i computes output rows [r_i, r_i+1) (axis 2) of a Conv with the whole
  weights, reading through a Slice node of its own (`slice_name`) the input rows those output
  rows need: rows r_i*stride - pad_top .. (r_i+1 - 1)*stride - pad_top + (k-1)*dilation, the
  halo included, clamped to the input. The part's top pad is what the clamp cut at the top
  (0 inside the input), its bottom pad likewise; left and right pads are the layer's. Any
  kernel, stride, dilation, pads and group split by rows (auto_pad is made explicit first).
  What is fused after the Conv is per pixel, so each part keeps it.

The result is read back as an ordinary layer graph, so the dataflow model, the profiler, the
search and every engine see the parts (and the row Slices) as layers like any other: a part
mapped to one element and a part mapped to another run at once, and the Concat is a layer of
its own. Outputs are those of the unsplit model (the same arithmetic, per channel and per
pixel), up to the float rounding of the convolution algorithm each part's shape selects.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from hetflow.errors import InputError

from hetflow.model.graph import CnnGraph
from hetflow.model.reader import to_cnn_graph

SPLITTABLE = ("Conv", "Gemm", "MatMul")
AXES = ("channels", "rows")  # what a split's part sizes count; rows split a 2-D Conv only


@dataclass(frozen=True)
class LayerSplit:
    """Layer `layer` computed as parts of `sizes[i]` output channels (axis "channels") or
    output rows (axis "rows") each, in order."""

    layer: str
    sizes: tuple[int, ...]
    axis: str = "channels"

    def to_dict(self) -> dict[str, Any]:
        """{"layer": ..., "channels": [...]} or {"layer": ..., "rows": [...]}: the key names
        the axis (a file without "rows" splits channels, as plans did before rows split)."""
        return {"layer": self.layer, self.axis: list(self.sizes)}

    @staticmethod
    def from_dict(d: dict[str, Any], source: str = "split") -> "LayerSplit":
        given = [a for a in AXES if d.get(a) is not None]
        if len(given) != 1:
            raise InputError(f"{source}: split of layer {d.get('layer')!r} must give exactly "
                             f"one of {' or '.join(map(repr, AXES))} (the part sizes along "
                             f"that axis); it gives {len(given)}")
        return LayerSplit(str(d["layer"]), tuple(int(c) for c in d[given[0]]), given[0])


def part_name(layer: str, i: int) -> str:
    """The name of part i of `layer` in the split graph (the fused layer takes its first
    node's name, which is the layer's own)."""
    return f"{layer}/part{i}"


def concat_name(layer: str) -> str:
    return f"{layer}/concat"


def slice_name(layer: str, i: int) -> str:
    """The Slice node (a layer of its own) that cuts the input rows part i of a row split of
    `layer` reads."""
    return f"{layer}/slice{i}"


def output_channels(graph: CnnGraph, layer: str) -> int:
    lay = graph.layer(layer)
    shape = graph.tensors[lay.outputs[0]].shape
    axis = 1 if lay.op_type.split("+")[0] == "Conv" else len(shape) - 1
    return int(shape[axis])


def output_rows(graph: CnnGraph, layer: str) -> int:
    """Output rows (axis 2) of a Conv layer with a 4-D output; 0 for anything else."""
    lay = graph.layer(layer)
    shape = graph.tensors[lay.outputs[0]].shape
    return int(shape[2]) if lay.op_type.split("+")[0] == "Conv" and len(shape) == 4 else 0


def split_size(graph: CnnGraph, layer: str, axis: str) -> int:
    """How many output channels or rows (`axis`) layer `layer` has to split."""
    return output_rows(graph, layer) if axis == "rows" else output_channels(graph, layer)


def channels_for(fractions: Sequence[float], total: int, unit: str = "channels"
                 ) -> tuple[int, ...]:
    """Whole channels (or rows: `unit`) per part for `fractions` (largest remainder), each
    part at least one."""
    if total < len(fractions):
        raise InputError(f"cannot split {total} {unit} into {len(fractions)} parts")
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


def rows_for(fractions: Sequence[float], total: int) -> tuple[int, ...]:
    """Whole output rows per part for `fractions`, as channels_for."""
    return channels_for(fractions, total, "rows")


def check_split(graph: CnnGraph, split: LayerSplit) -> None:
    """InputError naming the layer unless `split` can be applied to `graph`."""
    try:
        lay = graph.layer(split.layer)
    except (KeyError, ValueError):
        raise InputError(f"split: the model has no layer {split.layer!r}") from None
    if split.axis not in AXES:
        raise InputError(f"split: layer {split.layer!r}: unknown split axis {split.axis!r} "
                         f"(use {' or '.join(AXES)})")
    head = lay.op_type.split("+")[0]
    if head not in SPLITTABLE:
        raise InputError(f"split: layer {split.layer!r} is a {lay.op_type}; only "
                         f"{', '.join(SPLITTABLE)} layers (with what is fused after them) split")
    if split.axis == "rows":
        if head != "Conv":
            raise InputError(f"split: layer {split.layer!r} is a {lay.op_type}; only a Conv "
                             "layer splits by rows")
        x = graph.tensors[lay.inputs[0]].shape
        if len(x) != 4 or len(graph.tensors[lay.outputs[0]].shape) != 4:
            raise InputError(f"split: layer {split.layer!r} is a {len(x) - 2}-D convolution "
                             f"(input shape {list(x)}); only a 2-D one splits by rows")
    elif head == "Conv" and int(lay.attrs.get("group", 1) or 1) != 1:
        raise InputError(f"split: layer {split.layer!r} is a grouped convolution "
                         f"(group={lay.attrs['group']}); its output channels cannot be split "
                         "apart from its input channels (split it by rows)")
    unit = "output rows" if split.axis == "rows" else "output channels"
    total = split_size(graph, split.layer, split.axis)
    if len(split.sizes) < 2 or any(c < 1 for c in split.sizes) or sum(split.sizes) != total:
        raise InputError(f"split: layer {split.layer!r} has {total} {unit}; a split needs two "
                         f"or more parts of at least one of them summing to it, got "
                         f"{list(split.sizes)}")


@dataclass(frozen=True)
class _ConvRows:
    """The row geometry of a 2-D Conv: input rows `height`, kernel rows `k`, stride, dilation
    and explicit pads (top, left, bottom, right), auto_pad resolved."""

    height: int
    k: int
    stride: int
    dilation: int
    pads: tuple[int, int, int, int]

    @staticmethod
    def of(node: onnx.NodeProto, x_shape: Sequence[int], w_shape: Sequence[int],
           layer: str) -> "_ConvRows":
        at = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        kernel = list(at.get("kernel_shape") or w_shape[2:])
        strides = list(at.get("strides") or [1, 1])
        dilations = list(at.get("dilations") or [1, 1])
        auto = at.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else str(auto)
        if len(kernel) != 2 or len(x_shape) != 4:
            raise InputError(f"split: layer {layer!r} is not a 2-D convolution; only a 2-D one "
                             "splits by rows")
        if auto in ("NOTSET", ""):
            pads = list(at.get("pads") or [0, 0, 0, 0])
        elif auto == "VALID":
            pads = [0, 0, 0, 0]
        elif auto in ("SAME_UPPER", "SAME_LOWER"):
            pads = [0, 0, 0, 0]
            for ax in (0, 1):
                size = int(x_shape[2 + ax])
                out = -(-size // strides[ax])
                total = max(0, (out - 1) * strides[ax] + (kernel[ax] - 1) * dilations[ax] + 1
                            - size)
                small, big = total // 2, total - total // 2
                pads[ax], pads[ax + 2] = (small, big) if auto == "SAME_UPPER" else (big, small)
        else:
            raise InputError(f"split: layer {layer!r} has auto_pad={auto!r}, which a row split "
                             "does not know")
        return _ConvRows(int(x_shape[2]), int(kernel[0]), int(strides[0]), int(dilations[0]),
                         tuple(int(p) for p in pads))  # type: ignore[arg-type]

    def part(self, lo: int, hi: int) -> tuple[int, int, int, int]:
        """(first input row, end input row, top pad, bottom pad) of the part computing output
        rows [lo, hi): the input rows its windows reach, clamped to the input, and the pads
        that stand for what the clamp cut."""
        first = lo * self.stride - self.pads[0]
        last = (hi - 1) * self.stride - self.pads[0] + (self.k - 1) * self.dilation
        a, b = max(first, 0), min(last, self.height - 1)
        return a, b + 1, a - first, last - b


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
        rows = None
        if split.axis == "rows":
            axis = 2
            x = chain[0].input[0]
            rows = _ConvRows.of(chain[0], graph.tensors[x].shape,
                                list(self.inits[chain[0].input[1]].dims)
                                if chain[0].input[1] in self.inits else [], split.layer)
        else:
            axis = 1 if chain[0].op_type == "Conv" else rank - 1
        bounds = np.concatenate([[0], np.cumsum(split.sizes)])
        total = int(bounds[-1])
        inner = {t for n in chain for t in n.output}  # tensors made inside the chain
        new_nodes, new_inits, part_outs = [], [], []
        for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            lo, hi = int(lo), int(hi)
            if rows is not None:
                new_nodes.append(self._row_slice(split.layer, i, x, rows, lo, hi, new_inits))
            for k, node in enumerate(chain):
                nn = onnx.NodeProto()
                nn.CopyFrom(node)
                nn.name = part_name(split.layer, i) if k == 0 else f"{node.name}/part{i}"
                del nn.input[:]
                for j, t in enumerate(node.input):
                    if t in inner:
                        nn.input.append(f"{t}/part{i}")
                    elif rows is not None and k == 0 and j == 0:
                        nn.input.append(new_nodes[-1].output[0])
                    elif t in self.inits:
                        ax = (self._row_axis(node, j, self.inits[t], rank, total, split.layer)
                              if rows is not None else
                              self._weight_axis(node, j, self.inits[t], rank, axis, total,
                                                split.layer))
                        if ax is None:
                            nn.input.append(t)
                        else:
                            name = f"{t}/part{i}"
                            new_inits.append(_slice(self.inits[t], ax, lo, hi, name))
                            nn.input.append(name)
                    else:
                        nn.input.append(t)
                if rows is not None and k == 0:  # the part's own pads, top and bottom
                    _, _, top, bottom = rows.part(lo, hi)
                    kept_attrs = [at for at in nn.attribute
                                  if at.name not in ("pads", "auto_pad")]
                    del nn.attribute[:]
                    nn.attribute.extend(kept_attrs)
                    nn.attribute.append(onnx.helper.make_attribute(
                        "pads", [top, rows.pads[1], bottom, rows.pads[3]]))
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
        for node in new_nodes:  # parts of a row split share the layer's weights
            for t in node.input:
                self.uses[t] = self.uses.get(t, 0) + 1
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
    def _row_slice(layer: str, i: int, x: str, rows: "_ConvRows", lo: int, hi: int,
                   new_inits: list) -> onnx.NodeProto:
        """The Slice node giving part i (output rows [lo, hi)) the input rows it reads."""
        a, b, _, _ = rows.part(lo, hi)
        if a >= b:
            raise InputError(f"split: layer {layer!r}: part {i} (output rows {lo}..{hi - 1}) "
                             "reads only padding, no input row; give it rows that reach the "
                             "input")
        name = slice_name(layer, i)
        for what, v in (("starts", a), ("ends", b), ("axes", 2)):
            new_inits.append(numpy_helper.from_array(np.array([v], np.int64), f"{name}/{what}"))
        return onnx.helper.make_node("Slice", [x] + [f"{name}/{w}" for w in
                                                     ("starts", "ends", "axes")],
                                     [f"{name}/rows"], name=name)

    @staticmethod
    def _row_axis(node: onnx.NodeProto, j: int, t: onnx.TensorProto, rank: int, total: int,
                  layer: str) -> int | None:
        """The axis of initializer input j of `node` that runs along the output rows, or None
        where the whole initializer serves every part (the Conv's weights and bias, a
        per-channel parameter, a scalar)."""
        if node.op_type in ("Conv", "BatchNormalization"):
            return None
        # broadcast against the output: rows are axis 2 from the left
        return _broadcast_axis(node, t, rank, 2, total, layer, "rows")

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
        return _broadcast_axis(node, t, rank, axis, total, layer, "channels")


def _broadcast_axis(node: onnx.NodeProto, t: onnx.TensorProto, rank: int, axis: int,
                    total: int, layer: str, what: str) -> int | None:
    """The axis of parameter `t` (broadcast against the output of rank `rank`) along the
    output's `axis`: None where it is 1 or absent (the parameter serves every part), InputError
    where it is neither 1 nor the output's `total`."""
    dims = list(t.dims)
    ax = axis - (rank - len(dims))
    if ax < 0 or not dims or dims[ax] == 1:
        return None
    if dims[ax] == total:
        return ax
    raise InputError(f"split: layer {layer!r}: node {node.name!r} ({node.op_type}) has a "
                     f"parameter of shape {dims} that does not follow the output {what}")


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
           "rows_for", "output_channels", "output_rows", "split_size", "part_name",
           "concat_name", "slice_name", "SPLITTABLE", "AXES"]
