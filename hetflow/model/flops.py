"""FLOP formulas per ONNX operator (multiply-add = 2 FLOPs). None means 'no formula'."""
from __future__ import annotations

import math
from typing import Callable

import onnx

from hetflow.model.graph import TensorInfo

# Operators that only move or relabel data: zero arithmetic.
DATA_MOVEMENT = {
    "Concat", "Flatten", "Reshape", "Transpose", "Dropout", "Identity", "Pad", "Split", "Squeeze",
    "Unsqueeze", "Shape", "Gather", "Slice", "Constant", "Cast", "Expand", "Tile", "ConstantOfShape",
}
ELEMENTWISE_1 = {"Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "Abs", "Neg",
                 "Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "PRelu", "Sqrt", "Exp", "Pow",
                 "Elu", "Selu", "Floor", "Ceil", "Erf", "Not", "Equal", "Less", "Greater", "Where"}
ELEMENTWISE_COST = {"HardSwish": 4, "BatchNormalization": 2, "Softmax": 3, "LogSoftmax": 3,
                    "InstanceNormalization": 5, "LayerNormalization": 5, "Gelu": 8, "Mish": 6}


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def node_flops(node: onnx.NodeProto, shapes: dict[str, TensorInfo],
               weight_shapes: dict[str, tuple[int, ...]]) -> int | None:
    """FLOPs of one node, given the shapes of all its inputs/outputs (activations and weights)."""

    def shape(name: str) -> tuple[int, ...] | None:
        if name in shapes:
            return shapes[name].shape
        return weight_shapes.get(name)

    out = shapes.get(node.output[0]) if node.output else None
    out_elems = out.elements if out is not None else 0
    op = node.op_type
    if op in DATA_MOVEMENT:
        return 0
    if op in ELEMENTWISE_1:
        return out_elems
    if op in ELEMENTWISE_COST:
        return ELEMENTWISE_COST[op] * out_elems
    if op in ("Conv", "ConvTranspose"):
        w = shape(node.input[1])
        x = shape(node.input[0])
        if w is None or x is None or out is None:
            return None
        k = math.prod(w[2:])
        bias = out_elems if len(node.input) > 2 and node.input[2] else 0
        if op == "Conv":  # w: (Cout, Cin/group, k...)
            return 2 * out_elems * w[1] * k + bias
        # ConvTranspose w: (Cin, Cout/group, k...): every input element scatters into Cout/g*k outputs
        return 2 * math.prod(x) * w[1] * k + bias
    if op in ("Gemm", "MatMul"):
        a, b = shape(node.input[0]), shape(node.input[1])
        if a is None or b is None or out is None:
            return None
        if op == "Gemm":
            k = a[0] if _attr(node, "transA", 0) else a[-1]
        else:
            k = a[-1]
        bias = out_elems if op == "Gemm" and len(node.input) > 2 and node.input[2] else 0
        return 2 * out_elems * k + bias
    if op in ("MaxPool", "AveragePool", "LpPool"):
        return out_elems * math.prod(_attr(node, "kernel_shape", [1]))
    if op in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax"):
        x = shape(node.input[0])
        return math.prod(x) if x is not None else None
    if op == "LRN":
        return out_elems * (2 * int(_attr(node, "size", 5)) + 3)
    if op == "Resize":
        mode = _attr(node, "mode", b"nearest")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        return out_elems * (1 if mode == "nearest" else 4 if mode == "linear" else 16)
    return None


FlopsFn = Callable[[onnx.NodeProto, dict, dict], "int | None"]
