"""Random CNN-like ONNX models: branches, joins, residual adds, concats, pooling.

Used by property tests (every mapping of every such DAG must give a live CSDF app whose
pipelined run reproduces the reference) and by benchmarks that need graphs of a given size.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from hetflow.model.reader import normalise, to_cnn_graph


def random_cnn_model(n_layers: int, seed: int = 0, channels: int = 4, size: int = 8,
                     branchiness: float = 0.5) -> onnx.ModelProto:
    """A valid ONNX model with `n_layers` nodes; every dangling tensor is a model output."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    tensors = {"input": (channels, size, size)}  # name -> (C, H, W)
    consumed: set[str] = set()
    order = ["input"]
    for i in range(n_layers):
        # prefer recent tensors (chains), sometimes reach back (branches / skip connections)
        def pick() -> str:
            if rng.random() < branchiness and len(order) > 1:
                return order[int(rng.integers(0, len(order)))]
            return order[-1]

        a = pick()
        c, h, w = tensors[a]
        name, out = f"l{i}", f"t{i}"
        kind = rng.choice(["conv", "relu", "add", "concat", "pool"], p=[.4, .15, .2, .15, .1])
        same = [t for t in order if tensors[t] == (c, h, w) and t != a]
        same_hw = [t for t in order if tensors[t][1:] == (h, w) and t != a]
        if kind == "add" and same:
            b = same[int(rng.integers(0, len(same)))]
            nodes.append(helper.make_node("Add", [a, b], [out], name=name))
            tensors[out] = (c, h, w)
            consumed |= {a, b}
        elif kind == "concat" and same_hw and c + tensors[same_hw[-1]][0] <= 4 * channels:
            b = same_hw[int(rng.integers(0, len(same_hw)))]
            if c + tensors[b][0] > 4 * channels:
                b = same_hw[-1]
            nodes.append(helper.make_node("Concat", [a, b], [out], name=name, axis=1))
            tensors[out] = (c + tensors[b][0], h, w)
            consumed |= {a, b}
        elif kind == "pool" and h >= 2:
            nodes.append(helper.make_node("MaxPool", [a], [out], name=name, kernel_shape=[2, 2],
                                          strides=[2, 2]))
            tensors[out] = (c, h // 2, w // 2)
            consumed.add(a)
        elif kind == "relu":
            nodes.append(helper.make_node("Relu", [a], [out], name=name))
            tensors[out] = (c, h, w)
            consumed.add(a)
        else:
            co = int(rng.integers(max(1, channels // 2), 2 * channels + 1))
            wname = f"{name}.weight"
            wt = (rng.standard_normal((co, c, 3, 3)) * np.sqrt(2.0 / (9 * c))).astype(np.float32)
            inits.append(numpy_helper.from_array(wt, wname))
            nodes.append(helper.make_node("Conv", [a, wname], [out], name=name,
                                          kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
            tensors[out] = (co, h, w)
            consumed.add(a)
        order.append(out)
    sinks = [t for t in order[1:] if t not in consumed] or [order[-1]]
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, channels, size, size])
    outs = [helper.make_tensor_value_info(t, TensorProto.FLOAT, [1, *tensors[t]]) for t in sinks]
    graph = helper.make_graph(nodes, f"random{seed}", [inp], outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def random_cnn_graph(n_layers: int, seed: int = 0, **kw):
    """The CnnGraph of `random_cnn_model` (normalised as if read from a file)."""

    model = normalise(random_cnn_model(n_layers, seed, **kw), f"random{seed}", {})
    g = to_cnn_graph(model, f"random{seed}")
    g.model_hash = f"random-{n_layers}-{seed}"
    return g
