"""int8 elements on ONNX Runtime: static QDQ quantization, its cache, and its accuracy."""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetflow.backends import get_backend
from hetflow.backends.quantize import float32_copy, int8_model_path, random_calibration
from hetflow.errors import BackendError
from hetflow.model import load_model
from hetflow.model.accuracy import Tolerance, compare_runs
from hetflow.model.subnet import extract_subnet
from hetflow.platform import ProcessingElement

CORE = sorted(os.sched_getaffinity(0))[0]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HETFLOW_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def classifier(tmp_path_factory, dtype=np.float32):
    """x -> conv -> relu -> conv -> flatten -> gemm -> y (a tiny classifier) in `dtype`."""
    rng = np.random.default_rng(0)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = [numpy_helper.from_array(a.astype(dtype), n) for n, a in (
        ("w1", rng.standard_normal((8, 3, 3, 3)) * 0.3),
        ("w2", rng.standard_normal((8, 8, 3, 3)) * 0.2),
        ("wf", rng.standard_normal((10, 8 * 8 * 8)) * 0.05), ("bf", np.zeros(10)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"], name="relu1"),
             helper.make_node("Conv", ["b", "w2"], ["c"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["c"], ["d"], name="flat"),
             helper.make_node("Gemm", ["d", "wf", "bf"], ["y"], name="fc", transB=1)]
    g = helper.make_graph(nodes, "tinycls",
                          [helper.make_tensor_value_info("x", elem, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", elem, [1, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path_factory.mktemp("m") / "tinycls.onnx"
    onnx.save(m, path)
    return load_model(path)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return classifier(tmp_path_factory)


@pytest.fixture(scope="module")
def graph16(tmp_path_factory):
    """The classifier as an fp16 export: float16 weights, input and output."""
    return classifier(tmp_path_factory, np.float16)


def cpu(precision="fp32"):
    name = f"cpu{CORE}" + ("" if precision == "fp32" else f"@{precision}")
    return ProcessingElement(name, "cpu", (CORE,), cluster="c", precision=precision)


def whole(graph):
    return extract_subnet(graph, [layer.name for layer in graph.layers])


def test_an_int8_element_runs_a_quantized_model_close_to_fp32(graph, cache):
    sub = whole(graph)
    fp32 = get_backend("cpu").prepare(sub, cpu())
    int8 = get_backend("cpu").prepare(sub, cpu("int8"))
    ops = {n.op_type for n in onnx.load(next((cache / "int8").glob("*.onnx"))).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    frames = random_calibration(sub, frames=16, seed=1)
    ref = [fp32.run(f) for f in frames]
    got = [int8.run(f) for f in frames]
    assert all(g["y"].dtype == np.float32 for g in got)  # channels stay float32
    # a frame beyond the calibrated ranges is clipped: its error is several times the median
    report = compare_runs(got, ref, Tolerance(rel_l2=0.5, top1_flips=0.25))
    assert report.passed, report.to_dict()
    assert 0 < report.outputs[0].rel_l2_median < 0.05  # it did compute in int8, closely


def test_the_quantized_model_is_cached_by_subnet_and_calibration(graph, cache):
    sub = whole(graph)
    first = int8_model_path(sub)
    stamp = first.stat().st_mtime_ns
    assert int8_model_path(sub) == first and first.stat().st_mtime_ns == stamp
    other = int8_model_path(sub, random_calibration(sub, seed=7))
    part = int8_model_path(extract_subnet(graph, ["conv1", "relu1"]))
    assert len({first, other, part}) == 3 and first.parent == cache / "int8"


def test_int8_sessions_are_not_shared_with_fp32_ones(graph):
    backend = get_backend("cpu")
    assert backend.share_key(cpu()) != backend.share_key(cpu("int8"))
    runner = backend.prepare(whole(graph), cpu("int8"))
    assert backend.prepare_like(runner, cpu()) is None


def test_a_precision_the_backend_cannot_run_names_the_element():
    # the platform lets no CPU element be fp16; a backend still says no to what it cannot run
    bogus = ProcessingElement("cpu0", "cpu", (CORE,))
    object.__setattr__(bogus, "precision", "fp16")
    with pytest.raises(BackendError, match=r"ort_cpu cannot run .* on cpu0: it runs fp32, int8, "
                                           r"not fp16"):
        get_backend("cpu").prepare(extract_subnet_dummy(), bogus)


def extract_subnet_dummy():
    from hetflow.model.subnet import Subnet

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "r",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])])
    return Subnet("relu", ("r",), helper.make_model(g), ["x"], ["y"])


def test_random_calibration_needs_float_inputs():
    from hetflow.model.subnet import Subnet

    g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], name="c", to=1)], "c",
                          [helper.make_tensor_value_info("x", TensorProto.INT64, [1, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])])
    with pytest.raises(BackendError, match="input 'x' of cast is INT64; int8 quantizes float32 "
                                           "and float16"):
        random_calibration(Subnet("cast", ("c",), helper.make_model(g), ["x"], ["y"]))


@pytest.mark.parametrize("layers", [None, ["conv1", "relu1"], ["relu1", "conv2", "flat"]])
def test_a_float32_copy_computes_the_fp16_model_and_keeps_its_borders(graph16, layers):
    import onnxruntime as ort

    sub = extract_subnet(graph16, layers or [layer.name for layer in graph16.layers])
    copy = float32_copy(sub.model)
    onnx.checker.check_model(copy)
    assert not any(t.data_type == TensorProto.FLOAT16 for t in copy.graph.initializer)
    for mine, theirs in ((copy.graph.input, sub.model.graph.input),
                         (copy.graph.output, sub.model.graph.output)):
        assert [(v.name, v.type.tensor_type.elem_type) for v in mine] == \
            [(v.name, v.type.tensor_type.elem_type) for v in theirs]
    feeds = random_calibration(sub, frames=1, seed=3)[0]
    assert all(a.dtype == np.float16 for a in feeds.values())
    want = ort.InferenceSession(sub.serialized()).run(None, feeds)
    got = ort.InferenceSession(copy.SerializeToString()).run(None, feeds)
    for g, w in zip(got, want):
        assert g.dtype == np.float16
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=2e-2,
                                   atol=2e-2 * float(np.abs(w).max()))


def test_an_fp16_model_runs_at_int8_taking_and_giving_float16(graph16):
    sub = whole(graph16)
    ref = get_backend("cpu").prepare(sub, cpu())
    int8 = get_backend("cpu").prepare(sub, cpu("int8"))
    frames = random_calibration(sub, frames=16, seed=1)
    got = [int8.run(f) for f in frames]
    assert all(g["y"].dtype == np.float16 for g in got)  # as the fp16 model's neighbours want
    report = compare_runs(got, [ref.run(f) for f in frames], Tolerance(rel_l2=0.5,
                                                                       top1_flips=0.25))
    assert report.passed, report.to_dict()
    assert 0 < report.outputs[0].rel_l2_median < 0.05
