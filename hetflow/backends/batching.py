"""Batches: a runner of batch b fires on b frames at once (SDF rate b on its channels).

A sub-network is cut with batch 1 (leading dim 1 on every border tensor). `batched_subnet`
rewrites it to leading dim b: border shapes get b, intermediate shapes are dropped (re-inferred
by the backend), and Reshape nodes whose constant target pins batch 1 get b there; a Reshape
whose constant target cannot carry a batch is a BackendError naming the node.
`gather` stacks 1..b frames (leading dim 1 each) into one array per input of leading dim b,
padding with copies of the last real frame; `split` gives back the first n rows as frames, so
the padding's outputs are dropped.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from hetflow.errors import BackendError

if TYPE_CHECKING:
    from hetflow.model.subnet import Subnet


def check_batch(batch: int, where: str) -> int:
    if not isinstance(batch, (int, np.integer)) or isinstance(batch, bool) or batch < 1:
        raise BackendError(f"{where}: batch must be a positive integer, not {batch!r}")
    return int(batch)


def _set_leading(value: onnx.ValueInfoProto, batch: int, what: str, subnet: "Subnet") -> None:
    dims = value.type.tensor_type.shape.dim
    if not dims or not (dims[0].HasField("dim_param") or dims[0].dim_value == 1):
        raise BackendError(f"sub-network {subnet.name}: {what} {value.name!r} has no leading "
                           "batch dim of 1, so it cannot run batched")
    dims[0].Clear()
    dims[0].dim_value = batch


def _constant_values(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """Tensor name -> its constant value (initializers and Constant nodes' `value`)."""
    found = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    found[n.output[0]] = a.t
    return found


def _batched_shape(shape: np.ndarray, batch: int, node: onnx.NodeProto,
                   subnet: "Subnet") -> np.ndarray | None:
    """The Reshape target `shape` at batch b: None when it carries the batch already (0 keeps
    the input's leading dim; -1 with every other dim given infers it)."""
    if shape.ndim != 1 or shape.size == 0:
        raise BackendError(f"node {node.name!r} (Reshape) of sub-network {subnet.name}: target "
                           f"shape {shape.tolist()} cannot carry a batch")
    lead, rest = int(shape[0]), shape[1:]
    if lead == 0 or (lead == -1 and (rest > 0).all()):
        return None
    if lead == 1:
        out = shape.copy()
        out[0] = batch
        return out
    raise BackendError(f"node {node.name!r} (Reshape) of sub-network {subnet.name}: target "
                       f"shape {shape.tolist()} pins the frames together, so it cannot run "
                       "batched")


def batched_model(subnet: "Subnet", batch: int) -> onnx.ModelProto:
    """`subnet`'s model at leading dim `batch` (see the module notes)."""
    model = onnx.ModelProto()
    model.CopyFrom(subnet.model)
    g = model.graph
    if batch == 1:
        return model
    weights = {t.name for t in g.initializer}
    for v in g.input:
        if v.name not in weights:
            _set_leading(v, batch, "input", subnet)
    for v in g.output:
        _set_leading(v, batch, "output", subnet)
    del g.value_info[:]
    constants = _constant_values(model)
    for n in g.node:
        if n.op_type != "Reshape" or len(n.input) < 2 or n.input[1] not in constants:
            continue
        shape = numpy_helper.to_array(constants[n.input[1]])
        fixed = _batched_shape(shape, batch, n, subnet)
        if fixed is not None:  # a new tensor: the old one may feed other nodes
            name = f"{n.input[1]}__hetflow_b{batch}_{n.name}"
            g.initializer.append(numpy_helper.from_array(fixed.astype(shape.dtype), name))
            n.input[1] = name
    return model


def batched_subnet(subnet: "Subnet", batch: int) -> "Subnet":
    """`subnet` with its model at leading dim `batch` (itself at batch 1)."""
    if batch == 1:
        return subnet
    return replace(subnet, model=batched_model(subnet, batch), _memo={})


def gather(frames: Sequence[Mapping[str, np.ndarray]], names: Sequence[str], batch: int,
           where: str) -> dict[str, np.ndarray]:
    """{input: array of leading dim `batch`}: the frames' rows, then copies of the last."""
    out: dict[str, np.ndarray] = {}
    for name in names:
        rows = [frame_input(f, name, where) for f in frames]
        out[name] = np.concatenate(pad(rows, batch, where), axis=0)
    return out


def check_rows(n: int, batch: int, where: str) -> None:
    """BackendError unless 1 <= `n` <= `batch` frames were given for a batch."""
    if not 1 <= n <= batch:
        raise BackendError(f"{where}: {n} frames for a batch of {batch} (give 1 to {batch})")


def pad(rows: list[np.ndarray], batch: int, where: str) -> list[np.ndarray]:
    """`rows` (1..batch of them) and copies of the last up to `batch`."""
    check_rows(len(rows), batch, where)
    return rows + [rows[-1]] * (batch - len(rows))


def frame_input(frame: Mapping[str, np.ndarray], name: str, where: str) -> np.ndarray:
    try:
        x = frame[name]
    except KeyError:
        raise BackendError(f"{where}: input {name!r} was not given") from None
    if np.ndim(x) == 0 or np.shape(x)[0] != 1:
        raise BackendError(f"{where}: input {name!r} of a frame has shape {np.shape(x)}; a "
                           "frame has leading dim 1")
    return x


def split(outputs: Mapping[str, np.ndarray], n: int) -> list[dict[str, np.ndarray]]:
    """The first `n` rows of each output, as `n` frames of leading dim 1 (copies: the caller
    owns them)."""
    return [{k: np.array(v[i:i + 1]) for k, v in outputs.items()} for i in range(n)]
