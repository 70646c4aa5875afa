"""A small ONNX graph builder for the zoo: appends nodes and random weights, tracks shapes.

Every method takes the input tensor(s) and returns the output `Tensor` (name + NCHW shape), so a
model function reads like its PyTorch `forward`. Shapes are computed here with the same formulas
as the operators and asserted where ops join tensors (Add, Concat, Gemm), so a wrong architecture
fails while it is built, not later in ONNX Runtime.

Naming: a node's output tensor has the node's name; weights are named like torchvision's
state_dict (`<node>.weight`, `.bias`, `.running_mean`, `.running_var`), so parameters can be
counted by name (see `parameter_count`).
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

OPSET = 17
IR_VERSION = 8  # the IR of opset 17; ONNX Runtime 1.17+ reads it
PARAM_SUFFIXES = (".weight", ".bias")  # what torchvision counts as parameters


@dataclass(frozen=True)
class Tensor:
    """An activation tensor of the graph being built."""

    name: str
    shape: tuple[int, ...]

    @property
    def channels(self) -> int:
        return self.shape[1]


def seed_for(model_name: str) -> int:
    """A stable seed from the model name (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.sha256(model_name.encode()).digest()[:8], "little")


def _window_out(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool) -> int:
    """Output length of a sliding window (Conv, pooling) along one axis."""
    span = size + 2 * pad - kernel
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    # PyTorch and ONNX Runtime drop a last window that would start in the end padding
    # (ONNX's own shape inference does not; no zoo model has such a window).
    return out - 1 if (out - 1) * stride >= size + pad else out


class GraphBuilder:
    """Builds one float32, batch-1, static-shape ONNX model with deterministic random weights."""

    def __init__(self, model_name: str, input_shape: Sequence[int]):
        self.model_name = model_name
        self.input = Tensor("input", tuple(input_shape))
        self._rng = np.random.default_rng(seed_for(model_name))
        # Weights are written straight into the final proto: make_graph/make_model would copy
        # them twice more, which costs seconds for VGG-19's 548 MB.
        self._model = onnx.ModelProto()
        self._shapes: dict[str, tuple[int, ...]] = {}  # intermediate tensors, for value_info
        self._names: set[str] = {"input"}

    # -- weights ---------------------------------------------------------------------------

    def _add_initializer(self, name: str, array: np.ndarray) -> str:
        self._claim(name)
        tensor = self._model.graph.initializer.add()
        tensor.name = name
        tensor.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        tensor.dims.extend(array.shape)
        # raw_data is little-endian by the ONNX spec (a no-op copy on little-endian hosts)
        tensor.raw_data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        return name

    def _normal(self, name: str, shape: tuple[int, ...], std: float) -> str:
        array = self._rng.standard_normal(shape, dtype=np.float32)
        array *= np.float32(std)
        return self._add_initializer(name, array)

    def _uniform(self, name: str, shape: tuple[int, ...], low: float, high: float) -> str:
        array = self._rng.uniform(low, high, shape).astype(np.float32)
        return self._add_initializer(name, array)

    def _constant(self, name: str, value: np.ndarray) -> str:
        """A non-trainable input (Clip bounds, Pad amounts), shared by every node that needs it."""
        if name not in self._names:
            self._add_initializer(name, value)
        return name

    # -- nodes -----------------------------------------------------------------------------

    def _claim(self, name: str) -> None:
        if name in self._names:
            raise ValueError(f"zoo model {self.model_name}: name {name!r} used twice")
        self._names.add(name)

    def _node(self, op: str, name: str, inputs: Sequence[str], shape: tuple[int, ...],
              **attrs) -> Tensor:
        self._claim(name)
        node = helper.make_node(op, list(inputs), [name], name=name, **attrs)
        self._model.graph.node.append(node)
        self._shapes[name] = shape
        return Tensor(name, shape)

    def conv(self, x: Tensor, name: str, out_channels: int, kernel: int, stride: int = 1,
             pad: int = 0, group: int = 1, bias: bool = True) -> Tensor:
        n, c, h, w = x.shape
        assert c % group == 0 and out_channels % group == 0, (name, c, out_channels, group)
        fan_in = c // group * kernel * kernel
        inputs = [x.name, self._normal(f"{name}.weight", (out_channels, c // group, kernel, kernel),
                                       np.sqrt(2.0 / fan_in))]  # He init keeps activations O(1)
        if bias:
            inputs.append(self._normal(f"{name}.bias", (out_channels,), 0.01))
        shape = (n, out_channels, _window_out(h, kernel, stride, pad, False),
                 _window_out(w, kernel, stride, pad, False))
        return self._node("Conv", name, inputs, shape, kernel_shape=[kernel, kernel],
                          strides=[stride, stride], pads=[pad] * 4, group=group)

    def batch_norm(self, x: Tensor, name: str, eps: float = 1e-5) -> Tensor:
        c = (x.channels,)
        # Random positive running variance and non-zero mean: a BN-folding pass has real work.
        inputs = [x.name, self._uniform(f"{name}.weight", c, 0.5, 1.5),
                  self._normal(f"{name}.bias", c, 0.1),
                  self._normal(f"{name}.running_mean", c, 0.1),
                  self._uniform(f"{name}.running_var", c, 0.5, 1.5)]
        return self._node("BatchNormalization", name, inputs, x.shape, epsilon=eps)

    def relu(self, x: Tensor, name: str) -> Tensor:
        return self._node("Relu", name, [x.name], x.shape)

    def leaky_relu(self, x: Tensor, name: str, alpha: float) -> Tensor:
        return self._node("LeakyRelu", name, [x.name], x.shape, alpha=alpha)

    def relu6(self, x: Tensor, name: str) -> Tensor:
        """ReLU6 as torch.onnx exports it: Clip with min/max inputs (opset >= 11)."""
        low = self._constant("relu6.min", np.array(0.0, dtype=np.float32))
        high = self._constant("relu6.max", np.array(6.0, dtype=np.float32))
        return self._node("Clip", name, [x.name, low, high], x.shape)

    def max_pool(self, x: Tensor, name: str, kernel: int, stride: int, pad: int = 0,
                 ceil_mode: bool = False) -> Tensor:
        return self._pool("MaxPool", x, name, kernel, stride, pad, ceil_mode)

    def avg_pool(self, x: Tensor, name: str, kernel: int, stride: int) -> Tensor:
        return self._pool("AveragePool", x, name, kernel, stride, 0, False)

    def _pool(self, op: str, x: Tensor, name: str, kernel: int, stride: int, pad: int,
              ceil_mode: bool) -> Tensor:
        n, c, h, w = x.shape
        shape = (n, c, _window_out(h, kernel, stride, pad, ceil_mode),
                 _window_out(w, kernel, stride, pad, ceil_mode))
        return self._node(op, name, [x.name], shape, kernel_shape=[kernel, kernel],
                          strides=[stride, stride], pads=[pad] * 4, ceil_mode=int(ceil_mode))

    def global_avg_pool(self, x: Tensor, name: str) -> Tensor:
        return self._node("GlobalAveragePool", name, [x.name], x.shape[:2] + (1, 1))

    def pad(self, x: Tensor, name: str, top: int, left: int, bottom: int, right: int) -> Tensor:
        """Zero padding of the spatial axes (ONNX order: all begins, then all ends)."""
        pads = np.array([0, 0, top, left, 0, 0, bottom, right], dtype=np.int64)
        n, c, h, w = x.shape
        return self._node("Pad", name, [x.name, self._constant(f"{name}.pads", pads)],
                          (n, c, h + top + bottom, w + left + right), mode="constant")

    def concat(self, xs: Sequence[Tensor], name: str) -> Tensor:
        n, _, h, w = xs[0].shape
        assert all(t.shape[0] == n and t.shape[2:] == (h, w) for t in xs), (name, xs)
        shape = (n, sum(t.channels for t in xs), h, w)
        return self._node("Concat", name, [t.name for t in xs], shape, axis=1)

    def add(self, a: Tensor, b: Tensor, name: str) -> Tensor:
        assert a.shape == b.shape, (name, a.shape, b.shape)
        return self._node("Add", name, [a.name, b.name], a.shape)

    def flatten(self, x: Tensor, name: str) -> Tensor:
        return self._node("Flatten", name, [x.name], (x.shape[0], int(np.prod(x.shape[1:]))),
                          axis=1)

    def gemm(self, x: Tensor, name: str, out_features: int, in_features: int) -> Tensor:
        """A torch Linear: weight stored (out, in), applied with transB=1 as torch.onnx does."""
        assert x.shape[1:] == (in_features,), (name, x.shape, in_features)
        inputs = [x.name, self._normal(f"{name}.weight", (out_features, in_features),
                                       np.sqrt(2.0 / in_features)),
                  self._normal(f"{name}.bias", (out_features,), 0.01)]
        return self._node("Gemm", name, inputs, (x.shape[0], out_features), transB=1)

    # -- model -----------------------------------------------------------------------------

    def build(self, output: Tensor, doc: str, version: str) -> onnx.ModelProto:
        """The finished model; the tensor `output` becomes the graph output named 'output'.

        Call once: the builder hands over its proto rather than copying it."""
        model, graph = self._model, self._model.graph
        for node in graph.node:
            node.output[:] = ["output" if o == output.name else o for o in node.output]
        graph.name = self.model_name
        graph.input.append(helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                         self.input.shape))
        graph.output.append(helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                                          output.shape))
        graph.value_info.extend(helper.make_tensor_value_info(t, TensorProto.FLOAT, s)
                                for t, s in self._shapes.items() if t != output.name)
        model.ir_version = IR_VERSION
        model.opset_import.append(helper.make_opsetid("", OPSET))
        model.producer_name, model.producer_version = "hetflow.model.zoo", version
        model.doc_string = doc
        helper.set_model_props(model, {"hetflow.zoo.name": self.model_name,
                                       "hetflow.zoo.version": version})
        return model


def parameter_count(model: onnx.ModelProto) -> int:
    """Trainable parameters as torchvision counts them: weights and biases (BN gamma/beta
    included), not BN running statistics nor constants such as Clip bounds."""
    return sum(int(np.prod(t.dims, dtype=np.int64)) for t in model.graph.initializer
               if t.name.endswith(PARAM_SUFFIXES))
