"""The CPU backend must agree with the unoptimised reference even where ORT's own graph
rewrites are wrong (Pad_Fusion folds Pad(0) into MaxPool: tiny_yolo_v2)."""
import numpy as np
import pytest

from hetflow.backends import backend_for
from hetflow.model import resolve_model
from hetflow.model.subnet import extract_subnet
from hetflow.platform.spec import ProcessingElement
from hetflow.runtime.check import reference_session
from hetflow.runtime.inputs import random_source


def test_tiny_yolo_v2_matches_reference():
    graph = resolve_model("tiny_yolo_v2")
    sub = extract_subnet(graph, [l.name for l in graph.layers])
    runner = backend_for(ProcessingElement("cpu0", "cpu", (0,))).prepare(sub, ProcessingElement("cpu0", "cpu", (0,)))
    x = random_source(graph)(0)
    got = runner.run(x)["output"]
    want = reference_session(graph).run(["output"], x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def _two_conv_model(dtype):
    """x -> Conv -> Relu -> Conv -> y in `dtype` (float16 or float32)."""
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) / 4).astype(dtype), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((2, 4, 1, 1)) / 2).astype(dtype), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")]
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    g = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", t, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", t, [1, 2, 8, 8])], [w1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_tolerance_follows_the_outputs_dtype(tmp_path, plan_for, dtype):
    """A split plan's outputs one rounding step of their dtype off pass (for float16 that is
    0.000488 near 1); 0.005 off at the largest value passes float16 (a few units in its last
    place) but not float32, which stays as tight as before; 0.05 off fails both. The error
    names the error found, the tolerance of the dtype and the stage."""
    import onnx

    from hetflow.errors import RuntimeFault
    from hetflow.model import load_model
    from hetflow.runtime.check import check_outputs

    path = tmp_path / f"two_{dtype}.onnx"
    onnx.save(_two_conv_model(dtype), path)
    graph = load_model(path)
    plan = plan_for(graph, {"conv1": "cpu0", "relu": "cpu0", "conv2": "cpu1"})  # a split
    source = random_source(graph)
    want = reference_session(graph).run(["y"], source(0))[0]
    assert want.dtype == np.dtype(dtype)

    def check(got):
        return check_outputs(graph, plan.app, {0: {"y": got}}, source)

    def largest_off(delta):
        got = want.copy()
        got.flat[np.argmax(np.abs(want))] += delta
        return got

    one_step = np.nextafter(want, np.inf, dtype=want.dtype)
    assert 0 < check(one_step) <= float(np.spacing(np.max(np.abs(want))))
    if dtype == "float16":
        assert check(largest_off(0.005)) >= 0.004
    else:
        with pytest.raises(RuntimeFault, match=r"max abs error 0\.005.*allowed there for float32"
                                               r".*stage cpu1"):
            check(largest_off(np.float32(0.005)))
        with pytest.raises(RuntimeFault, match=r"max abs error 0\.000488"):
            check(want + np.float32(0.000488))
    with pytest.raises(RuntimeFault, match=rf"max abs error 0\.05.*for {dtype}"):
        check(largest_off(0.05))


def test_fp16_one_rounding_step_passes(plan_for, tmp_path):
    """The case of issue 14: a split fp16 plan whose outputs differ by one fp16 rounding step
    of values near 1 (max abs error 0.000488), here at the output nearest 0, where float32's
    tolerance allowed only 0.0002."""
    import onnx

    from hetflow.model import load_model
    from hetflow.runtime.check import check_outputs, tolerance

    path = tmp_path / "two.onnx"
    onnx.save(_two_conv_model("float16"), path)
    graph = load_model(path)
    plan = plan_for(graph, {"conv1": "cpu0", "relu": "cpu0", "conv2": "cpu1"})
    source = random_source(graph)
    want = reference_session(graph).run(["y"], source(0))[0]
    got = want.copy()
    got.flat[np.argmin(np.abs(want))] += np.float16(0.000488)
    assert check_outputs(graph, plan.app, {0: {"y": got}}, source) == pytest.approx(0.000488,
                                                                                  rel=1e-3)
    rtol, atol = tolerance("float32")
    assert atol * max(1.0, float(np.abs(want).max())) < 0.000488  # float32's would refuse it


def test_the_reference_is_built_once_per_graph_and_runs_the_models_own_weights():
    """Its weights come from memory (not the serialised model): the outputs equal those of a
    session built from the model's bytes."""
    import onnxruntime as ort

    graph = resolve_model("squeezenet1_0")
    session = reference_session(graph)
    assert reference_session(graph) is session
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = ort.InferenceSession(graph.onnx.SerializeToString(), so,
                                 providers=["CPUExecutionProvider"])
    x = random_source(graph)(3)
    names = list(graph.outputs)
    for got, want in zip(session.run(names, x), plain.run(names, x)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
