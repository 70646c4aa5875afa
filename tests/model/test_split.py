"""Layer splits keep outputs exact: random Conv / Gemm / MatMul layers (with what is fused after
them) split at random channel counts compute what the unsplit layer computes, by ONNX Runtime
on both models (the oracle is the unsplit model, not our code); a split plan runs through the
engine with every frame equal to the unsplit model's."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st
from onnx import helper, numpy_helper

from hetflow.errors import InputError
from hetflow.model.reader import load_model
from hetflow.model.split import (LayerSplit, apply_splits, channels_for, concat_name,
                                 output_channels, output_rows, part_name, rows_for, slice_name,
                                 split_size)

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
        last = _batch_norm(rng, cout, last, inits, nodes)
    if act:
        nodes.append(helper.make_node(act, [last], ["a"], name="act"))
        last = "a"
    nodes[-1].output[0] = "y"
    out = (size + 2 * p - d * (k - 1) - 1) // s + 1
    return nodes, inits, [1, cin, size, size], [1, cout, out, out], cout


def _a(rng, n):
    return rng.standard_normal(n).astype(np.float32)


def _batch_norm(rng, cout: int, last: str, inits: list, nodes: list) -> str:
    """Append a BatchNormalization of `last` with random parameters; its output's name."""
    inits += [numpy_helper.from_array(np.abs(_a(rng, cout)) + 0.5, "scale"),
              numpy_helper.from_array(_a(rng, cout), "shift"),
              numpy_helper.from_array(_a(rng, cout), "mean"),
              numpy_helper.from_array(np.abs(_a(rng, cout)) + 0.5, "var")]
    nodes.append(helper.make_node("BatchNormalization", [last, "scale", "shift", "mean", "var"],
                                  ["n"], name="bn"))
    return "n"


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


# ---- row splits -------------------------------------------------------------------------------
@st.composite
def row_conv_layers(draw):
    """A random 2-D Conv (any kernel, stride, dilation, pads or auto_pad, group, depthwise too)
    with what may be fused after it, and its output rows."""
    group = draw(st.integers(1, 3))
    cin = group * draw(st.integers(1, 3))
    depthwise = draw(st.booleans())
    if depthwise:
        group = cin
    cout = group * draw(st.integers(1, 2 if depthwise else 3))
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    auto = draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    # ONNX Runtime (the oracle) runs no dilated convolution with SAME padding
    dh, dw = (1, 1) if auto.startswith("SAME") else (draw(st.integers(1, 2)),
                                                     draw(st.integers(1, 2)))
    reach_h, reach_w = dh * (kh - 1), dw * (kw - 1)
    h = draw(st.integers(max(2, reach_h + 1), 20))
    w = draw(st.integers(reach_w + 1, reach_w + 6))
    attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw], dilations=[dh, dw], group=group)
    if auto == "NOTSET":  # pads within the kernel's reach (every output row reads the input)
        pads = [draw(st.integers(0, reach_h)), draw(st.integers(0, reach_w)),
                draw(st.integers(0, reach_h)), draw(st.integers(0, reach_w))]
        attrs["pads"] = pads
        out_h = (h + pads[0] + pads[2] - reach_h - 1) // sh + 1
        out_w = (w + pads[1] + pads[3] - reach_w - 1) // sw + 1
    else:
        attrs["auto_pad"] = auto
        out_h, out_w = ((-(-h // sh), -(-w // sw)) if auto != "VALID" else
                        ((h - reach_h - 1) // sh + 1, (w - reach_w - 1) // sw + 1))
    rng = np.random.default_rng(draw(st.integers(0, 999)))
    bias = draw(st.booleans())
    inits = [_arr(rng, (cout, cin // group, kh, kw), "w")] + \
        ([_arr(rng, (cout,), "b")] if bias else [])
    nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["c"], name="conv",
                              **attrs)]
    last = "c"
    if draw(st.booleans()):
        last = _batch_norm(rng, cout, last, inits, nodes)
    act = draw(st.sampled_from([None, "Relu", "Sigmoid", "PRelu"]))
    if act == "PRelu":  # a per-channel slope: whole in every row part
        inits.append(numpy_helper.from_array(_a(rng, cout).reshape(cout, 1, 1), "slope"))
        nodes.append(helper.make_node("PRelu", [last, "slope"], ["a"], name="act"))
        last = "a"
    elif act:
        nodes.append(helper.make_node(act, [last], ["a"], name="act"))
        last = "a"
    nodes[-1].output[0] = "y"
    return nodes, inits, [1, cin, h, w], [1, cout, out_h, out_w], out_h


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layer=row_conv_layers(), data=st.data())
def test_a_conv_split_by_rows_computes_what_the_unsplit_one_does(layer, data, tmp_path):
    nodes, inits, x_shape, y_shape, rows = layer
    path = _save(nodes, inits, x_shape, y_shape, str(tmp_path / "one.onnx"))
    fuse = data.draw(st.booleans(), label="fuse")
    graph = load_model(path, fuse=fuse)
    head = graph.layers[0].name
    assert output_rows(graph, head) == rows and split_size(graph, head, "rows") == rows
    group = int(graph.layers[0].attrs.get("group", 1))
    event("depthwise" if group == x_shape[1] > 1 else "grouped" if group > 1 else "group 1")
    if rows < 2:
        event("one output row: refused")
        with pytest.raises(InputError, match=f"'conv' has {rows} output rows"):
            apply_splits(graph, [LayerSplit(head, (1, 1), "rows")], fuse)
        return
    k = data.draw(st.integers(2, min(4, rows)), label="parts")
    fractions = data.draw(st.lists(st.floats(0.05, 1.0), min_size=k, max_size=k), label="ratio")
    parts = rows_for(fractions, rows)
    split = apply_splits(graph, [LayerSplit(head, parts, "rows")], fuse)
    names = [l.name for l in split.layers]
    assert [part_name(head, i) for i in range(k)] == [n for n in names if "/part" in n][:k]
    assert [slice_name(head, i) for i in range(k)] == [n for n in names if "/slice" in n]
    assert concat_name(head) in names
    # each part computes its rows: the Conv part's output has exactly its share of the rows
    for i in range(k):
        out = split.layer(part_name(head, i)).outputs[0]
        assert split.tensors[out].shape[2] == parts[i]
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)
    want = _outputs(graph.onnx, x)
    got = _outputs(split.onnx, x)
    assert got.shape == want.shape == tuple(y_shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()))


def test_rows_for_gives_whole_rows_summing_to_the_layer():
    assert rows_for([1, 1, 1], 7) in ((3, 2, 2), (2, 3, 2), (2, 2, 3))
    assert rows_for([1e-6, 1.0], 10) == (1, 9)
    with pytest.raises(InputError, match="cannot split 2 rows into 3 parts"):
        rows_for([1, 1, 1], 2)


def test_row_splits_that_cannot_be_applied_name_the_layer(tmp_path):
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "fw"], ["y"], name="fc")]
    path = _save(nodes, [_arr(rng, (2, 2, 3, 3), "w"), _arr(rng, (2 * 3 * 3, 5), "fw")],
                 [1, 2, 3, 3], [1, 5], str(tmp_path / "m.onnx"))
    graph = load_model(path, fuse=True)
    with pytest.raises(InputError, match="'fc' is a Gemm; only a Conv layer splits by rows"):
        apply_splits(graph, [LayerSplit("fc", (2, 3), "rows")], True)
    with pytest.raises(InputError, match="'relu' is a Relu"):  # unfused: a layer of its own
        apply_splits(load_model(path), [LayerSplit("relu", (1, 2), "rows")], False)
    with pytest.raises(InputError, match="'conv' has 3 output rows"):  # more parts than rows
        apply_splits(graph, [LayerSplit("conv", (1, 1, 1, 0), "rows")], True)
    for bad in ((3,), (1, 1), (2, 2)):
        with pytest.raises(InputError, match="'conv' has 3 output rows"):
            apply_splits(graph, [LayerSplit("conv", bad, "rows")], True)
    with pytest.raises(InputError, match="'conv': unknown split axis 'cols'"):
        apply_splits(graph, [LayerSplit("conv", (1, 2), "cols")], True)


@pytest.mark.parametrize("dims", [1, 3])
def test_only_a_2d_convolution_splits_by_rows(tmp_path, dims):
    rng = np.random.default_rng(0)
    k = [3] * dims
    path = _save([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=k,
                                   pads=[1] * 2 * dims)],
                 [_arr(rng, (2, 2, *k), "w")], [1, 2, *[6] * dims], [1, 2, *[6] * dims],
                 str(tmp_path / "c.onnx"))
    graph = load_model(path)
    with pytest.raises(InputError, match=f"'conv' is a {dims}-D convolution"):
        apply_splits(graph, [LayerSplit("conv", (3, 3), "rows")], False)
    # by channels it splits as before
    split = apply_splits(graph, [LayerSplit("conv", (1, 1))], False)
    x = rng.standard_normal([1, 2, *[6] * dims]).astype(np.float32)
    np.testing.assert_allclose(_outputs(split.onnx, x), _outputs(graph.onnx, x), rtol=1e-5,
                               atol=1e-5)


def test_a_row_part_that_reads_only_padding_is_refused(tmp_path):
    rng = np.random.default_rng(0)  # pads of 3 around a 1x1 kernel: the first 3 rows are pad
    path = _save([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[1, 1],
                                   pads=[3, 0, 0, 0])],
                 [_arr(rng, (2, 2, 1, 1), "w")], [1, 2, 4, 4], [1, 2, 7, 4],
                 str(tmp_path / "c.onnx"))
    graph = load_model(path)
    with pytest.raises(InputError, match=r"'conv': part 0 \(output rows 0..1\) reads only "
                                         "padding"):
        apply_splits(graph, [LayerSplit("conv", (2, 5), "rows")], False)
    # a first part that reaches the input is fine
    split = apply_splits(graph, [LayerSplit("conv", (4, 3), "rows")], False)
    x = rng.standard_normal([1, 2, 4, 4]).astype(np.float32)
    np.testing.assert_array_equal(_outputs(split.onnx, x), _outputs(graph.onnx, x))


def test_a_split_is_written_under_the_key_of_its_axis():
    rows, channels = LayerSplit("conv", (2, 3), "rows"), LayerSplit("conv", (4, 4))
    assert rows.to_dict() == {"layer": "conv", "rows": [2, 3]}
    assert channels.to_dict() == {"layer": "conv", "channels": [4, 4]}  # as before rows split
    for s in (rows, channels):
        assert LayerSplit.from_dict(s.to_dict()) == s
    for bad in ({"layer": "conv"}, {"layer": "conv", "rows": [1, 1], "channels": [1, 1]}):
        with pytest.raises(InputError, match="must give exactly one of 'channels' or 'rows'"):
            LayerSplit.from_dict(bad, "p.json")
