"""Layer splits keep outputs exact: random Conv / Gemm / MatMul layers (with what is fused after
them) split at random channel counts compute what the unsplit layer computes, by ONNX Runtime
on both models (the oracle is the unsplit model, not our code); a split plan runs through the
engine with every frame equal to the unsplit model's."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import helper, numpy_helper

from hetflow.errors import InputError
from hetflow.model.reader import load_model
from hetflow.model.split import (LayerSplit, apply_splits, channels_for, concat_name,
                                 output_channels, part_name)

F = onnx.TensorProto.FLOAT


def _save(nodes, inits, x_shape, y_shape, path):
    g = helper.make_graph(nodes, "one", [helper.make_tensor_value_info("x", F, x_shape)],
                          [helper.make_tensor_value_info("y", F, y_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def _arr(rng, shape, name):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


@st.composite
def conv_layers(draw):
    cin, cout = draw(st.integers(1, 6)), draw(st.integers(2, 12))
    k, s, d = draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    p = draw(st.integers(0, k - 1))
    size = draw(st.integers(max(4, d * (k - 1) + 1), 9))
    bias, bn, act = draw(st.booleans()), draw(st.booleans()), draw(st.sampled_from(
        [None, "Relu", "Sigmoid"]))
    rng = np.random.default_rng(draw(st.integers(0, 999)))
    inits = [_arr(rng, (cout, cin, k, k), "w")] + ([_arr(rng, (cout,), "b")] if bias else [])
    nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["c"], name="conv",
                              kernel_shape=[k, k], strides=[s, s], dilations=[d, d],
                              pads=[p, p, p, p])]
    last = "c"
    if bn:
        inits += [numpy_helper.from_array(np.abs(_a(rng, cout)) + 0.5, "scale"),
                  numpy_helper.from_array(_a(rng, cout), "shift"),
                  numpy_helper.from_array(_a(rng, cout), "mean"),
                  numpy_helper.from_array(np.abs(_a(rng, cout)) + 0.5, "var")]
        nodes.append(helper.make_node("BatchNormalization", [last, "scale", "shift", "mean",
                                                             "var"], ["n"], name="bn"))
        last = "n"
    if act:
        nodes.append(helper.make_node(act, [last], ["a"], name="act"))
        last = "a"
    nodes[-1].output[0] = "y"
    out = (size + 2 * p - d * (k - 1) - 1) // s + 1
    return nodes, inits, [1, cin, size, size], [1, cout, out, out], cout


def _a(rng, n):
    return rng.standard_normal(n).astype(np.float32)


@st.composite
def dense_layers(draw):
    kdim, n = draw(st.integers(1, 16)), draw(st.integers(2, 16))
    rng = np.random.default_rng(draw(st.integers(0, 999)))
    if draw(st.booleans()):  # Gemm, B maybe transposed, bias maybe
        trans = draw(st.booleans())
        inits = [_arr(rng, (n, kdim) if trans else (kdim, n), "w")]
        ins = ["x", "w"]
        if draw(st.booleans()):
            inits.append(_arr(rng, (n,), "b"))
            ins.append("b")
        nodes = [helper.make_node("Gemm", ins, ["y"], name="fc", transB=int(trans))]
    else:  # MatMul + bias Add (+ Relu), as transformers export a Linear layer
        inits = [_arr(rng, (kdim, n), "w"), _arr(rng, (n,), "b")]
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="fc"),
                 helper.make_node("Add", ["m", "b"], ["y"], name="bias")]
        if draw(st.booleans()):
            nodes[-1].output[0] = "ab"
            nodes.append(helper.make_node("Relu", ["ab"], ["y"], name="act"))
    return nodes, inits, [1, kdim], [1, n], n


def _outputs(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so).run(None, {"x": x})[0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layer=st.one_of(conv_layers(), dense_layers()), data=st.data())
def test_a_split_layer_computes_what_the_unsplit_one_does(layer, data, tmp_path):
    nodes, inits, x_shape, y_shape, channels = layer
    path = _save(nodes, inits, x_shape, y_shape, str(tmp_path / "one.onnx"))
    fuse = data.draw(st.booleans(), label="fuse")
    graph = load_model(path, fuse=fuse)
    head = graph.layers[0].name
    assert output_channels(graph, head) == channels
    k = data.draw(st.integers(2, min(4, channels)), label="parts")
    fractions = data.draw(st.lists(st.floats(0.05, 1.0), min_size=k, max_size=k), label="ratio")
    parts = channels_for(fractions, channels)
    split = apply_splits(graph, [LayerSplit(head, parts)], fuse)
    names = [l.name for l in split.layers]
    assert [part_name(head, i) for i in range(k)] == [n for n in names if "/part" in n][:k]
    assert concat_name(head) in names
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)
    want = _outputs(graph.onnx, x)
    got = _outputs(split.onnx, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))


def test_channels_for_gives_whole_channels_summing_to_the_layer(tmp_path):
    assert channels_for([0.5, 0.5], 7) in ((4, 3), (3, 4))
    assert channels_for([1e-6, 1.0], 10) == (1, 9)  # every part keeps at least one channel
    assert sum(channels_for([0.2, 0.3, 0.5], 64)) == 64
    with pytest.raises(InputError, match="cannot split 2 channels into 3 parts"):
        channels_for([1, 1, 1], 2)


def test_splits_that_cannot_be_applied_name_the_layer(tmp_path):
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="dw", group=4,
                              kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["y"], name="pool", kernel_shape=[2, 2],
                              strides=[2, 2])]
    path = _save(nodes, [_arr(rng, (4, 1, 3, 3), "w")], [1, 4, 8, 8], [1, 4, 4, 4],
                 str(tmp_path / "dw.onnx"))
    graph = load_model(path, fuse=True)
    with pytest.raises(InputError, match="'dw' is a grouped convolution"):
        apply_splits(graph, [LayerSplit("dw", (2, 2))], True)
    with pytest.raises(InputError, match="'pool' is a MaxPool"):
        apply_splits(graph, [LayerSplit("pool", (2, 2))], True)
    with pytest.raises(InputError, match="no layer 'nope'"):
        apply_splits(graph, [LayerSplit("nope", (2, 2))], True)


def test_part_counts_must_cover_the_channels(tmp_path):
    rng = np.random.default_rng(0)
    path = _save([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[1, 1])],
                 [_arr(rng, (6, 2, 1, 1), "w")], [1, 2, 4, 4], [1, 6, 4, 4],
                 str(tmp_path / "c.onnx"))
    graph = load_model(path)
    for bad in ((6,), (3, 2), (0, 6), (4, 4)):
        with pytest.raises(InputError, match="'conv' has 6 output channels"):
            apply_splits(graph, [LayerSplit("conv", bad)], False)
