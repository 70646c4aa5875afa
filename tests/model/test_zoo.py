"""The model zoo: every model is valid ONNX, runs in ONNX Runtime, and has its published size.

Each model is built once per module (a module-scoped, parametrised fixture: pytest runs all tests
of one model together and frees it before the next, which matters for VGG-19's 548 MB).
"""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetflow.errors import InputError
from hetflow.model import zoo
from hetflow.model.zoo.builder import GraphBuilder

NAMES = [e.name for e in zoo.list_models()]
BIG = {"alexnet", "vgg19"}  # 233 MB and 548 MB of weights: deselect with -m "not slow"


def _conv(cin: int, cout: int, k: int, bias: bool = True, bn: bool = False) -> int:
    return cin * cout * k * k + (cout if bias else 0) + (2 * cout if bn else 0)


# Trainable parameters (weights, biases, BN gamma/beta; not running statistics). torchvision's
# published counts; MobileNet v1: Keras' trainable count; the two models of anchor_bench.py
# counted from their layer lists there.
PUBLISHED_PARAMS = {
    "alexnet": 61_100_840, "vgg19": 143_667_240, "googlenet": 6_624_904,
    "resnet18": 11_689_512, "resnet50": 25_557_032, "densenet121": 7_978_856,
    "mobilenet_v2": 3_504_872, "squeezenet1_0": 1_248_424, "mobilenet_v1": 4_231_976,
    "tiny_yolo_v2": sum(_conv(a, b, 3, bias=False, bn=True) for a, b in
                        zip([3, 16, 32, 64, 128, 256, 512, 1024], [16, 32, 64, 128, 256, 512,
                                                                    1024, 1024]))
    + _conv(1024, 125, 1),
    "emotion_ferplus": sum(_conv(a, b, 3) for a, b in
                           zip([1, 64, 64, 128, 128, 256, 256, 256, 256, 256],
                               [64, 64, 128, 128, 256, 256, 256, 256, 256, 256]))
    + (4096 * 1024 + 1024) + (1024 * 1024 + 1024) + (1024 * 8 + 8),
}

# Operators that show each model's character (all must be present).
SIGNATURE_OPS = {
    "alexnet": {"Conv", "Relu", "MaxPool", "Flatten", "Gemm"},
    "vgg19": {"Conv", "Relu", "MaxPool", "Flatten", "Gemm"},
    "googlenet": {"BatchNormalization", "Concat", "MaxPool", "GlobalAveragePool", "Gemm"},
    "tiny_yolo_v2": {"BatchNormalization", "LeakyRelu", "Pad", "MaxPool"},
    "resnet18": {"BatchNormalization", "Add", "GlobalAveragePool", "Gemm"},
    "resnet50": {"BatchNormalization", "Add", "GlobalAveragePool", "Gemm"},
    "densenet121": {"BatchNormalization", "Concat", "AveragePool", "GlobalAveragePool"},
    "emotion_ferplus": {"Conv", "Relu", "MaxPool", "Gemm"},
    "mobilenet_v1": {"BatchNormalization", "Clip", "GlobalAveragePool", "Gemm"},
    "mobilenet_v2": {"BatchNormalization", "Clip", "Add", "GlobalAveragePool", "Gemm"},
    "squeezenet1_0": {"Concat", "MaxPool", "GlobalAveragePool"},
}
ALLOWED_OPS = {"Conv", "BatchNormalization", "Relu", "LeakyRelu", "Clip", "MaxPool", "AveragePool",
               "GlobalAveragePool", "Concat", "Add", "Flatten", "Gemm", "Pad"}

# Node names as torchvision (or the reference) names the modules.
SAMPLE_NODES = {
    "alexnet": ["features.0", "features.12", "classifier.1", "classifier.6"],
    "vgg19": ["features.0", "features.36", "classifier.0", "classifier.6"],
    "googlenet": ["conv1.conv", "conv1.bn", "inception3a.branch3.1.conv",
                  "inception5b.branch4.0", "maxpool4", "fc"],
    "resnet18": ["conv1", "bn1", "layer1.0.conv1", "layer2.0.downsample.0", "layer4.1.bn2", "fc"],
    "resnet50": ["layer1.0.conv3", "layer1.0.downsample.1", "layer4.2.bn3", "fc"],
    "densenet121": ["features.conv0", "features.denseblock1.denselayer1.conv1",
                    "features.denseblock4.denselayer16.conv2", "features.transition3.pool",
                    "features.norm5", "classifier"],
    "mobilenet_v2": ["features.0.0", "features.1.conv.0.0", "features.1.conv.2",
                     "features.17.conv.3", "features.18.2", "classifier.1"],
    "squeezenet1_0": ["features.0", "features.3.squeeze", "features.12.expand3x3",
                      "classifier.1"],
}


@pytest.fixture(scope="module", params=[
    pytest.param(n, id=n, marks=[pytest.mark.slow] if n in BIG else []) for n in NAMES])
def built(request) -> tuple[zoo.ZooEntry, onnx.ModelProto]:
    return zoo.get_entry(request.param), zoo.build_model(request.param)


def test_checker_and_onnxruntime(built):
    entry, model = built
    data = model.SerializeToString()
    onnx.checker.check_model(data)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random(entry.input_shape, dtype=np.float32)
    (y,) = session.run(["output"], {"input": x})
    assert y.shape == entry.output_shape
    assert np.isfinite(y).all() and y.std() > 0


def _without_weight_data(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its big weights' data and all value_info dropped: shape inference needs only
    dims (and the values of small constants such as Pad amounts), and is quick on it."""
    skeleton = onnx.ModelProto(ir_version=model.ir_version)
    skeleton.opset_import.extend(model.opset_import)
    graph = skeleton.graph
    graph.node.extend(model.graph.node)
    graph.input.extend(model.graph.input)
    graph.output.extend(model.graph.output)
    for t in model.graph.initializer:
        small = t.data_type == onnx.TensorProto.INT64 or len(t.raw_data) <= 64
        graph.initializer.append(t if small else onnx.TensorProto(
            name=t.name, data_type=t.data_type, dims=t.dims))
    return skeleton


def _dims(value_info: onnx.ValueInfoProto) -> tuple[int, ...]:
    return tuple(d.dim_value for d in value_info.type.tensor_type.shape.dim)


def test_declared_shapes_match_onnx_shape_inference(built):
    entry, model = built
    inferred = onnx.shape_inference.infer_shapes(_without_weight_data(model), strict_mode=True,
                                                 data_prop=True)
    got = {vi.name: _dims(vi) for vi in inferred.graph.value_info}
    declared = {vi.name: _dims(vi) for vi in model.graph.value_info}
    node_outputs = {o for n in model.graph.node for o in n.output} - {"output"}
    assert set(declared) == node_outputs
    assert got == declared
    assert _dims(inferred.graph.output[0]) == entry.output_shape


def test_names_ops_and_format(built):
    entry, model = built
    graph = model.graph
    assert model.ir_version <= 9 and [(o.domain, o.version) for o in model.opset_import] == [
        ("", 17)]
    assert [i.name for i in graph.input] == ["input"] and _dims(graph.input[0]) == \
        entry.input_shape
    assert [o.name for o in graph.output] == ["output"]
    names = [n.name for n in graph.node]
    assert all(names) and len(set(names)) == len(names)
    # a node's (single) output tensor has the node's name, except the graph output
    assert all(list(n.output) in ([n.name], ["output"]) for n in graph.node)
    ops = {n.op_type for n in graph.node}
    assert SIGNATURE_OPS[entry.name] <= ops <= ALLOWED_OPS
    assert set(SAMPLE_NODES.get(entry.name, [])) <= set(names)
    assert all(t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.INT64)
               for t in graph.initializer)
    variances = [onnx.numpy_helper.to_array(t) for t in graph.initializer
                 if t.name.endswith(".running_var")]
    assert all((v > 0).all() for v in variances)  # random and positive: BN folding has work


def test_parameter_count_matches_published(built):
    entry, model = built
    assert zoo.parameter_count(model) == PUBLISHED_PARAMS[entry.name]


def test_build_is_deterministic_and_aliases_build_the_same_model():
    first = zoo.build_model("squeezenet1_0").SerializeToString()
    assert zoo.build_model("squeezenet1_0").SerializeToString() == first
    assert zoo.build_model("fer_plus").SerializeToString() == \
        zoo.build_model("emotion_ferplus").SerializeToString()
    assert zoo.get_entry("inception_v1") == zoo.get_entry("googlenet")
    assert zoo.get_entry("Inception-V1").name == "googlenet"


def test_entries_describe_the_models():
    entries = zoo.list_models()
    assert len(entries) == 11 and len({e.name for e in entries}) == 11
    assert zoo.get_entry("emotion_ferplus").paper_name == "Emotion FER"
    assert zoo.get_entry("alexnet").paper_name == "bvlc_alexnet"
    assert all(e.description and len(e.input_shape) == 4 for e in entries)


def test_unknown_name_raises_input_error_listing_known_names():
    with pytest.raises(InputError, match="resnet18") as info:
        zoo.get_entry("resnet19")
    assert "resnet19" in str(info.value) and "inception_v1" in str(info.value)
    with pytest.raises(InputError):
        zoo.build_model("nope")
    with pytest.raises(InputError):
        zoo.cached_model_path("nope")


def test_export_creates_parents_and_writes_the_built_model(tmp_path):
    path = zoo.export_model("mobilenet_v2", tmp_path / "a" / "b" / "mnv2.onnx")
    assert path == tmp_path / "a" / "b" / "mnv2.onnx"
    assert path.read_bytes() == zoo.build_model("mobilenet_v2").SerializeToString()
    assert os.listdir(path.parent) == ["mnv2.onnx"]  # no temporary file left behind
    plain = path.parent / "plain"
    plain.write_bytes(b"")
    assert path.stat().st_mode == plain.stat().st_mode  # usual permissions, not a temp file's


def test_export_is_atomic_when_the_write_fails(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"old")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(InputError, match="m.onnx"):
        zoo.export_model("squeezenet1_0", path)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["m.onnx"]


def test_export_to_an_unusable_path_is_an_input_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="file"):
        zoo.export_model("squeezenet1_0", tmp_path / "file" / "m.onnx")


def test_cached_model_path_builds_once(tmp_path, monkeypatch):
    monkeypatch.setenv("HETFLOW_CACHE", str(tmp_path))
    path = zoo.cached_model_path("fer_plus")
    assert path == tmp_path / "zoo" / f"emotion_ferplus-{zoo.ZOO_VERSION}.onnx"
    onnx.checker.check_model(str(path))
    calls = []
    monkeypatch.setattr(zoo, "export_model", lambda *a: calls.append(a))
    assert zoo.cached_model_path("emotion_ferplus") == path and calls == []


@settings(max_examples=40, deadline=None)
@given(size=st.integers(5, 40), kernel=st.integers(1, 5), stride=st.integers(1, 3),
       pad=st.integers(0, 2), ceil_mode=st.booleans(), groups=st.sampled_from([1, 2, 4]))
def test_builder_shapes_agree_with_onnxruntime(size, kernel, stride, pad, ceil_mode, groups):
    b = GraphBuilder("prop", (1, 4, size, size + 3))
    x = b.conv(b.input, "conv", 8, kernel, stride, min(pad, kernel // 2), group=groups)
    pool = min(kernel, x.shape[2])  # padding below half the window, as in real nets
    x = b.max_pool(x, "pool", pool, stride, min(pad, pool // 2), ceil_mode)
    x = b.pad(x, "pad", 0, 1, 2, 0)
    model = b.build(x, "property test", "test")
    options = ort.SessionOptions()
    options.log_severity_level = 3  # ORT warns where its shapes differ from ONNX's; we compare
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"input": np.ones(b.input.shape, np.float32)})
    assert y.shape == x.shape
