import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

from hetflow.errors import InputError
from hetflow.model import load_model
from hetflow.model.graph import CnnGraph
from hetflow.model.subnet import extract_subnet, subnet_key
from hetflow.model.synthetic import random_cnn_graph


def session(model_bytes: bytes, optimise: bool) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimise
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def inputs_for(graph: CnnGraph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {n: rng.standard_normal(graph.tensors[n].shape).astype(np.float32) for n in graph.inputs}


def run_in_sequence(graph: CnnGraph, groups: list[list[str]], optimise: bool = False):
    env = inputs_for(graph)
    for g in groups:
        sub = extract_subnet(graph, g)
        out = session(sub.serialized(), optimise).run(sub.outputs, {k: env[k] for k in sub.inputs})
        env.update(zip(sub.outputs, out))
    return [env[o] for o in graph.outputs]


def run_whole(graph: CnnGraph, optimise: bool = False):
    return session(graph.onnx.SerializeToString(), optimise).run(graph.outputs, inputs_for(graph))


def contiguous_groups(graph: CnnGraph, k: int, rng) -> list[list[str]]:
    names = [l.name for l in graph.layers]
    cuts = sorted(rng.choice(np.arange(1, len(names)), size=min(k, len(names)) - 1, replace=False))
    return [list(g) for g in np.split(np.array(names, dtype=object), cuts)]


def monotone_groups(graph: CnnGraph, k: int, rng, p_new: float = 0.3) -> list[list[str]]:
    """Groups that interleave in topological order (non-contiguous) but can run one after the
    other: a layer's group is at least the group of each of its predecessors."""
    group: dict[str, int] = {}
    for l in graph.layers:
        base = max((group[p] for p in graph.preds[l.name]), default=0)
        group[l.name] = min(k - 1, base + int(rng.random() < p_new))
    out = [[n for n, g in group.items() if g == i] for i in range(k)]
    return [g for g in out if g]


# ---- semantics on a hand-made diamond --------------------------------------------------------
@pytest.fixture(scope="module")
def diamond(tmp_path_factory) -> CnnGraph:
    """x -> A(conv) -> B(relu) -> D(add) ; A -> C(sigmoid) -> D; D is the output."""
    w = numpy_helper.from_array(np.ones((2, 2, 1, 1), np.float32), "w")
    unused = numpy_helper.from_array(np.ones((3,), np.float32), "unused")
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="A"),
             helper.make_node("Relu", ["a"], ["b"], name="B"),
             helper.make_node("Sigmoid", ["a"], ["c"], name="C"),
             helper.make_node("Add", ["b", "c"], ["d"], name="D")]
    g = helper.make_graph(nodes, "diamond",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                          [helper.make_tensor_value_info("d", TensorProto.FLOAT, [1, 2, 4, 4])],
                          [w, unused])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path_factory.mktemp("m") / "diamond.onnx"
    onnx.save(m, path)
    return load_model(path)


def test_inputs_and_outputs_of_a_cut(diamond):
    s = extract_subnet(diamond, ["A", "B"])
    assert s.inputs == ["x"] and s.outputs == ["a", "b"]  # a is read by C outside
    assert [t.name for t in s.model.graph.initializer] == ["w"]
    s = extract_subnet(diamond, ["C", "D", "B"])
    assert s.layers == ("B", "C", "D") and s.inputs == ["a"] and s.outputs == ["d"]
    assert s.model.graph.initializer == []
    onnx.checker.check_model(s.model, full_check=True)
    assert s.key == subnet_key(["D", "B", "C"]) == "B+C+D"


def test_bad_layer_sets_are_refused(diamond):
    with pytest.raises(InputError, match="layer 'Z', which the graph does not have"):
        extract_subnet(diamond, ["A", "Z"])
    with pytest.raises(InputError, match="at least one layer"):
        extract_subnet(diamond, [])
    with pytest.raises(InputError, match="not convex: layer 'B' is outside it"):
        extract_subnet(diamond, ["A", "D", "C"])
    no_onnx = CnnGraph("bare", diamond.layers, diamond.tensors, diamond.inputs, diamond.outputs)
    with pytest.raises(InputError, match="carries no ONNX model"):
        extract_subnet(no_onnx, ["A"])


def test_long_keys_are_hashed():
    key = subnet_key([f"layer_with_a_long_name_{i}" for i in range(40)])
    assert key.startswith("sha1:") and len(key) < 40
    assert key == subnet_key(reversed([f"layer_with_a_long_name_{i}" for i in range(40)]))


# ---- equivalence on random DAGs and zoo models -----------------------------------------------
@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 6), st.booleans())
def test_random_dags_cut_anyhow_give_the_same_outputs(seed, k, contiguous):
    graph = random_cnn_graph(20, seed=seed, branchiness=0.6)
    rng = np.random.default_rng(seed)
    groups = contiguous_groups(graph, k, rng) if contiguous else monotone_groups(graph, k, rng)
    # without graph optimisations the same kernels run in the same order: bit-identical
    for got, want in zip(run_in_sequence(graph, groups), run_whole(graph)):
        np.testing.assert_array_equal(got, want)


@pytest.fixture(scope="module", params=["resnet18", "googlenet", "squeezenet1_0", "densenet121"])
def zoo_graph(request) -> CnnGraph:
    zoo = pytest.importorskip("hetflow.model.zoo")
    return load_model(zoo.cached_model_path(request.param), fuse=request.param != "squeezenet1_0")


@pytest.mark.slow
def test_zoo_models_cut_into_stages_give_the_same_outputs(zoo_graph):
    want = run_whole(zoo_graph)
    rng = np.random.default_rng(len(zoo_graph.layers))
    for groups in (contiguous_groups(zoo_graph, 5, rng), monotone_groups(zoo_graph, 6, rng, 0.1)):
        assert sum(len(g) for g in groups) == len(zoo_graph.layers)
        for g, w in zip(run_in_sequence(zoo_graph, groups), want):
            np.testing.assert_array_equal(g, w)
    # with ORT's fusions each stage may fuse differently: equal up to float rounding
    for g, w in zip(run_in_sequence(zoo_graph, groups, optimise=True), run_whole(zoo_graph, True)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * float(np.abs(w).max()))


def test_densenet_cuts_fast_and_valid():
    zoo = pytest.importorskip("hetflow.model.zoo")
    graph = load_model(zoo.cached_model_path("densenet121"), fuse=True)
    names = [l.name for l in graph.layers]
    t0 = time.perf_counter()
    subs = [extract_subnet(graph, list(c)) for c in np.array_split(np.array(names, dtype=object), 50)]
    elapsed = time.perf_counter() - t0
    assert elapsed < 10.0, f"50 sub-networks of densenet121 took {elapsed:.2f} s"
    for s in subs[::10]:
        onnx.checker.check_model(s.model)
        used = {t for n in s.model.graph.node for t in n.input}
        assert {t.name for t in s.model.graph.initializer} <= used
    produced = [t for s in subs for t in s.outputs]
    assert set(graph.outputs) <= set(produced)


def test_model_local_functions_travel_with_the_subnet(tmp_path):
    """A node that calls a model-local function (as dynamo exports may write) runs in its
    sub-network: the function comes along."""
    fn = helper.make_function("local", "Swish", ["x"], ["y"],
                              [helper.make_node("Sigmoid", ["x"], ["s"]),
                               helper.make_node("Mul", ["x", "s"], ["y"])],
                              [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Swish", ["a"], ["b"], name="swish", domain="local")]
    g = helper.make_graph(nodes, "fn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("local", 1)], functions=[fn])
    m.ir_version = 8
    onnx.save(m, tmp_path / "fn.onnx")
    graph = load_model(tmp_path / "fn.onnx")
    sub = extract_subnet(graph, ["swish"])
    onnx.checker.check_model(sub.model, full_check=True)
    a = np.array([[-1.0, 0.0, 1.0, 2.0]], np.float32)
    got = session(sub.serialized(), False).run(sub.outputs, {"a": a})[0]
    np.testing.assert_allclose(got, a / (1 + np.exp(-a)), rtol=1e-6)


def test_a_cut_is_made_once_and_its_bytes_serialized_once(diamond):
    a = extract_subnet(diamond, ["B", "C"], name="first")
    b = extract_subnet(diamond, ["C", "B"], name="second")  # the same set, another order
    assert (a.name, b.name) == ("first", "second") and a.layers == b.layers
    assert b.model is a.model and a.serialized() is b.serialized()
    other = extract_subnet(diamond, ["B"])
    assert other.model is not a.model


def test_the_cut_cache_holds_the_whole_model_and_every_layer_cut_alone(diamond, monkeypatch):
    import hetflow.model.subnet as subnet

    monkeypatch.setattr(subnet, "CUT_CACHE_BYTES", 0)  # the model's weights set the bound
    cutter = subnet.SubnetExtractor(diamond)
    names = [l.name for l in diamond.layers]
    whole = cutter.extract(names)
    alone = [cutter.extract([n]) for n in names]
    assert cutter.extract(names).model is whole.model
    assert all(cutter.extract([n]).model is a.model for n, a in zip(names, alone))
    monkeypatch.setattr(subnet, "CUT_CACHE_MODELS", 1.0)  # room for the whole model only
    cutter.extract(["B"], check_convex=False)  # a new cut: the oldest go
    assert cutter.extract(names).model is not whole.model


def test_the_cut_cache_keeps_recent_cuts_within_its_byte_bound(diamond, monkeypatch):
    import hetflow.model.subnet as subnet

    # room for the newest cut only
    monkeypatch.setattr(subnet.SubnetExtractor, "max_bytes", lambda self: -1)
    first = extract_subnet(diamond, ["B"])
    extract_subnet(diamond, ["C"])
    assert extract_subnet(diamond, ["C"]).model is extract_subnet(diamond, ["C"]).model
    again = extract_subnet(diamond, ["B"])
    assert again.model is not first.model  # evicted, cut anew
    feeds = {t: np.ones(diamond.tensors[t].shape, np.float32) for t in first.inputs}
    np.testing.assert_array_equal(  # and the same computation
        ort.InferenceSession(again.serialized()).run(None, feeds)[0],
        ort.InferenceSession(first.serialized()).run(None, feeds)[0])


# ---- the weights handed to ONNX Runtime from memory ------------------------------------------
def _session(model: bytes, names=(), arrays=()):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if names:
        so.add_external_initializers(list(names),
                                     [ort.OrtValue.ortvalue_from_numpy(a) for a in arrays])
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4))
def test_a_weightless_cut_runs_as_its_serialized_model(seed, k):
    """The model without its large weights plus the weights from memory is, to ONNX Runtime, the
    model with them (the serialised cut is the oracle); small initializers stay in the model."""
    graph = random_cnn_graph(12, seed=seed, branchiness=0.5)
    rng = np.random.default_rng(seed)
    for layers in contiguous_groups(graph, k, rng):
        sub = extract_subnet(graph, layers)
        model, names, arrays = sub.weightless()
        assert len(model) < len(sub.serialized()) or not names
        big = {t.name for t in sub.model.graph.initializer
               if numpy_helper.to_array(t).nbytes >= 1024}
        assert set(names) == big
        feeds = {i: rng.standard_normal(graph.tensors[i].shape).astype(np.float32)
                 for i in sub.inputs}
        got = _session(model, names, arrays).run(sub.outputs, feeds)
        want = _session(sub.serialized()).run(sub.outputs, feeds)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_a_weight_of_a_dtype_numpy_lacks_stays_in_the_model():
    w = helper.make_tensor("w", TensorProto.BFLOAT16, [32, 32], vals=[0] * 1024)
    x = helper.make_tensor("x", TensorProto.FLOAT, [32, 32], vals=np.ones(1024).tolist())
    g = helper.make_graph([helper.make_node("Add", ["a", "x"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 32])],
                          [w, x])
    from hetflow.model.subnet import weightless_model

    model, names, arrays = weightless_model(helper.make_model(g))
    kept = {t.name: t for t in onnx.load_from_string(model).graph.initializer}
    assert names == ["x"] and arrays[0].dtype == np.float32
    assert kept["w"].data_location != TensorProto.EXTERNAL
    assert kept["x"].data_location == TensorProto.EXTERNAL and not kept["x"].float_data
