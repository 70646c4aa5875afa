"""The ONNX reader: normalisation, shapes, FLOPs, fusion and clear errors on bad input."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetflow.errors import InputError, ModelError
from hetflow.model import load_model, parse_input_shapes
from hetflow.model.reader import fuse_chains
from hetflow.model.synthetic import random_cnn_graph


def _save(model, tmp_path, name="m.onnx"):
    p = tmp_path / name
    onnx.save(model, p)
    return p


def conv_bn_relu_model(batch="N"):
    w = numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w")
    b = numpy_helper.from_array(np.zeros(8, np.float32), "b")
    bn = [numpy_helper.from_array(np.ones(8, np.float32), n) for n in ("g", "beta", "m", "v")]
    bn[1] = numpy_helper.from_array(np.zeros(8, np.float32), "beta")
    bn[2] = numpy_helper.from_array(np.zeros(8, np.float32), "m")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["c", "g", "beta", "m", "v"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("Constant", [], ["shape"], name="const",
                         value=numpy_helper.from_array(np.array([1, -1], np.int64))),
        helper.make_node("Reshape", ["r", "shape"], ["flat"], name="reshape"),
        helper.make_node("Gemm", ["flat", "fw"], ["y"], name="fc", transB=1),
    ]
    fw = numpy_helper.from_array(np.ones((10, 8 * 16 * 16), np.float32), "fw")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, "cbr", [x], [y], [w, b, *bn, fw])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_reads_layers_shapes_and_flops(tmp_path):
    g = load_model(_save(conv_bn_relu_model(), tmp_path))
    assert [l.op_type for l in g.layers] == ["Conv", "BatchNormalization", "Relu", "Reshape", "Gemm"]
    assert g.tensors["x"].shape == (1, 3, 16, 16)  # symbolic batch fixed to 1
    assert g.tensors["y"].shape == (1, 10)
    conv = g.layer("conv")
    assert conv.flops == 2 * (8 * 16 * 16) * (3 * 9) + 8 * 16 * 16
    assert conv.param_bytes == (8 * 27 + 8) * 4
    assert g.layer("fc").flops == 2 * 10 * 2048
    assert g.layer("reshape").inputs == ("r",)  # the Constant became an initializer
    assert len(g.model_hash) == 64


def test_fusion_keeps_external_edges(tmp_path):
    g = load_model(_save(conv_bn_relu_model(), tmp_path), fuse=True)
    assert g.layers[0].op_type == "Conv+BatchNormalization+Relu"
    assert g.layers[0].nodes == ("conv", "bn", "relu")
    assert g.layers[0].outputs == ("r",)
    assert [e.tensor for e in g.edges] == ["r", "flat"]


def test_unsorted_nodes_are_sorted(tmp_path):
    m = conv_bn_relu_model()
    nodes = list(m.graph.node)[::-1]
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    g = load_model(_save(m, tmp_path))
    idx = g.layer_index
    assert all(idx[e.src] < idx[e.dst] for e in g.edges)


def test_missing_and_garbage_files(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_model(tmp_path / "nope.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf \xff\xfe")
    with pytest.raises(ModelError, match="bad.onnx: not a readable ONNX model"):
        load_model(bad)
    full = _save(conv_bn_relu_model(), tmp_path).read_bytes()
    trunc = tmp_path / "trunc.onnx"
    trunc.write_bytes(full[: len(full) // 3])
    with pytest.raises(ModelError, match="trunc.onnx"):
        load_model(trunc)


def test_control_flow_is_named(tmp_path):
    m = conv_bn_relu_model()
    then = helper.make_graph([], "then", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m.graph.node.append(helper.make_node("If", ["cond"], ["z"], name="branchy",
                                         then_branch=then, else_branch=then))
    with pytest.raises(ModelError, match="node 'branchy' is control flow"):
        load_model(_save(m, tmp_path))


def test_cycle_is_named(tmp_path):
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="r1"),
             helper.make_node("Relu", ["a"], ["b"], name="r2")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])
    y = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 2])
    m = helper.make_model(helper.make_graph(nodes, "cyc", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match="cycle through nodes"):
        load_model(_save(m, tmp_path))


def test_dynamic_spatial_dims_need_input_shape(tmp_path):
    m = conv_bn_relu_model()
    m.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "H"
    p = _save(m, tmp_path)
    with pytest.raises(InputError, match="--input-shape x="):
        load_model(p)
    g = load_model(p, parse_input_shapes(["x=1x3x16x16"]))
    assert g.tensors["y"].shape == (1, 10)
    assert parse_input_shapes(["x=1,3,16,16"]) == {"x": (1, 3, 16, 16)}
    with pytest.raises(InputError, match="expected NAME=DxDx"):
        parse_input_shapes(["x=1xtwo"])
    with pytest.raises(InputError, match="model's inputs are"):
        load_model(p, {"nope": (1, 3, 16, 16)})


@pytest.mark.parametrize("seed", range(5))
def test_random_models_have_every_tensor_shaped(seed):
    g = random_cnn_graph(20, seed)
    assert len(g.layers) == 20
    for l in g.layers:
        for t in l.inputs + l.outputs:
            assert g.tensors[t].elements > 0
    assert fuse_chains(g).layers  # fusion of a graph without BN is harmless


def exporter_patterns_model():
    """What torch's exporter writes, in small: shufflenet's channel split (Slice bounds from
    Shape -> Gather -> Div, which ONNX's data propagation does not follow), ViT's class token
    (Expand to a shape from ConstantOfShape -> Equal -> Where), and a weight deduplicated
    through an Identity node (efficientnet's 'onnx::Conv_651')."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "w")
    tok = numpy_helper.from_array(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), "tok")
    nodes = [
        helper.make_node("Identity", ["w"], ["onnx::Conv_7"], name="Identity_0"),
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "one"], ["c"], name="gather", axis=0),
        helper.make_node("Div", ["c", "two"], ["half"], name="div"),
        helper.make_node("Unsqueeze", ["half", "zero1"], ["end"], name="unsq"),
        helper.make_node("Slice", ["x", "zero1", "end", "one1"], ["lo"], name="slice"),
        helper.make_node("Conv", ["lo", "onnx::Conv_7"], ["c1"], name="conv1"),
        helper.make_node("Conv", ["lo", "w"], ["c2"], name="conv2"),  # the weight shared
        helper.make_node("ConstantOfShape", ["four"], ["ones"], name="cos",
                         value=numpy_helper.from_array(np.array([1], np.int64))),
        helper.make_node("Equal", ["ones", "minus1"], ["eq"], name="eq"),
        helper.make_node("Where", ["eq", "ones", "target"], ["shp"], name="where"),
        helper.make_node("Expand", ["tok", "shp"], ["t"], name="expand"),
        helper.make_node("Concat", ["c1", "c2", "t"], ["y"], name="cat", axis=1),
    ]
    inits = [w, tok, i64("one", 1), i64("two", 2), i64("zero1", [0]), i64("one1", [1]),
             i64("four", [4]), i64("minus1", -1), i64("target", [1, 4, 4, 4])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    m = helper.make_model(helper.make_graph(nodes, "exp", [x], [y], inits),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_exporter_shape_subgraphs_fold_and_weights_are_initializers(tmp_path):
    import onnxruntime as ort

    from hetflow.model.subnet import extract_subnet

    m = exporter_patterns_model()
    # what ONNX's own inference leaves open: the Slice's and the Expand's output shapes
    inferred = onnx.shape_inference.infer_shapes(m, data_prop=True)
    static = {v.name for v in inferred.graph.value_info
              if all(d.HasField("dim_value") for d in v.type.tensor_type.shape.dim)}
    assert "lo" not in static and "t" not in static
    g = load_model(_save(m, tmp_path))
    assert g.tensors["lo"].shape == (1, 4, 4, 4) and g.tensors["y"].shape == (1, 12, 4, 4)
    assert [l.op_type for l in g.layers] == ["Slice", "Conv", "Conv", "Concat"]
    assert g.layer("conv1").inputs == ("lo",)  # the weight is a weight, not an edge
    assert g.layer("conv1").param_bytes == g.layer("conv2").param_bytes == 4 * 16
    x = {"x": np.random.default_rng(1).standard_normal((1, 8, 4, 4)).astype(np.float32)}
    want = ort.InferenceSession(m.SerializeToString()).run(None, x)[0]
    got = ort.InferenceSession(g.onnx.SerializeToString()).run(None, x)[0]
    np.testing.assert_array_equal(got, want)
    for layers in (["conv1"], ["conv1", "conv2"], [l.name for l in g.layers]):
        sub = extract_subnet(g, layers)
        onnx.checker.check_model(sub.model, full_check=True)
        assert {i.name for i in sub.model.graph.initializer} >= {"w"}
        assert "w" not in sub.inputs


def test_run_time_shapes_are_named(tmp_path):
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
             helper.make_node("Transpose", ["nz"], ["y"], name="t")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, None)
    m = helper.make_model(helper.make_graph(nodes, "nz", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match=r"node 'nonzero' \(NonZero\).*input shapes \(x=1x4\)"
                                         r".*run time"):
        load_model(_save(m, tmp_path))


def test_matmul_with_bias_fuses_but_not_with_an_activation_operand(tmp_path):
    """Transformers' Linear layers: MatMul + Add(bias) (+ activation) is one fused layer; an
    Add of two activations (a residual) is not a bias."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["mb"], name="bias"),
             helper.make_node("Relu", ["mb"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w"], ["m2"], name="mm2"),
             helper.make_node("Add", ["m2", "m2"], ["y"], name="twice")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    m = helper.make_model(helper.make_graph(nodes, "lin", [x], [y], [w, b]),
                          opset_imports=[helper.make_opsetid("", 17)])
    g = load_model(_save(m, tmp_path), fuse=True)
    assert [l.op_type for l in g.layers] == ["MatMul+Add+Relu", "MatMul", "Add"]
    assert g.layers[0].flops == 2 * 5 * 8 * 8 + 5 * 8 + 5 * 8
    assert g.layers[0].param_bytes == (64 + 8) * 4


def test_folding_follows_the_models_opset(tmp_path):
    """Unsqueeze took its axes as an attribute before opset 13: a constant Unsqueeze folds by
    the model's own opset, not the newest."""
    nodes = [helper.make_node("Unsqueeze", ["c"], ["u"], name="unsq", axes=[0]),
             helper.make_node("Reshape", ["x", "u"], ["y"], name="reshape")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    c = numpy_helper.from_array(np.array(6, np.int64), "c")
    m = helper.make_model(helper.make_graph(nodes, "old", [x], [y], [c]),
                          opset_imports=[helper.make_opsetid("", 11)])
    m.ir_version = 6
    g = load_model(_save(m, tmp_path))
    assert [l.op_type for l in g.layers] == ["Reshape"] and g.tensors["y"].shape == (6,)
