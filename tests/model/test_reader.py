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
