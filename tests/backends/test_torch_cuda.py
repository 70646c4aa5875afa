"""torch_cuda backend. Three tiers, each skipped with its reason where the machine lacks it:
no torch at all (CI): import and error paths; torch + onnx2torch on CPU: the ONNX -> torch
conversion; a CUDA GPU: runners, CUDA graphs and their outputs against ONNX Runtime."""
import importlib.util
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetflow.backends import get_backend
from hetflow.backends.torch_cuda import TorchCudaBackend
from hetflow.errors import BackendError
from hetflow.model import resolve_model
from hetflow.model.subnet import Subnet, extract_subnet
from hetflow.platform.spec import ProcessingElement
from tests.cuda_marks import NEEDS_CUDA

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_ONNX2TORCH = HAS_TORCH and importlib.util.find_spec("onnx2torch") is not None


def _cuda_available() -> bool:
    if not HAS_TORCH:
        return False
    import torch

    return torch.cuda.is_available()


HAS_CUDA = _cuda_available()
needs_onnx2torch = pytest.mark.skipif(not HAS_ONNX2TORCH,
                                      reason="torch and onnx2torch are not installed")


def needs_cuda(test):
    for mark in NEEDS_CUDA:
        test = mark(test)
    return test


GPU = ProcessingElement(name="gpu0", kind="gpu", cores=(0,), device_index=0)
RTOL, ATOL = 1e-3, 1e-4  # against ONNX Runtime on the CPU


def assert_close(got, want, name):
    """rtol 1e-3, atol 1e-4 on the tensor scaled to at most 1: the zoo's random weights give
    activations in the hundreds, where fp32 summation order alone moves values by ~1e-4."""
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got / scale, want / scale, rtol=RTOL, atol=ATOL, err_msg=name)


def make_model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                       for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                           for n, s in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def whole(model: onnx.ModelProto, name="t") -> Subnet:
    return Subnet(name, tuple(n.name for n in model.graph.node), model,
                  [i.name for i in model.graph.input], [o.name for o in model.graph.output])


def relu_model() -> onnx.ModelProto:
    return make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                      [("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])])


def ort_reference(subnet: Subnet, feeds: dict) -> dict:
    """ONNX Runtime, graph optimisation off: ORT's Pad->MaxPool fusion pads with -inf where the
    model pads with 0 (wrong for tiny_yolo_v2's pad6/pool6), so its optimised graph is no
    reference."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(subnet.serialized(), so, providers=["CPUExecutionProvider"])
    return dict(zip(subnet.outputs, sess.run(subnet.outputs,
                                             {k: feeds[k] for k in subnet.inputs})))


def chunks(graph, n: int) -> list[Subnet]:
    """The graph cut into n consecutive runs of layers (consecutive in topological order, so
    each is convex)."""
    names = [l.name for l in graph.layers]
    size = -(-len(names) // n)
    return [extract_subnet(graph, names[i:i + size], name=f"{graph.name}[{i}]")
            for i in range(0, len(names), size)]


def model_input(graph, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(graph.tensors[n].shape, dtype=np.float32)
            for n in graph.inputs}


def row_split_model() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(unsplit, split): a grouped 3x5 Conv + Relu (stride 2, uneven pads) and the same layer
    split by output rows into three parts, each reading its rows through a constant Slice."""
    from hetflow.model.reader import normalise, to_cnn_graph
    from hetflow.model.split import LayerSplit, apply_splits, output_rows, rows_for

    w = np.random.default_rng(2).standard_normal((8, 1, 3, 5)).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", group=4,
                                         kernel_shape=[3, 5], strides=[2, 1], pads=[1, 2, 2, 2]),
                        helper.make_node("Relu", ["c"], ["y"], name="relu")],
                       [("x", [1, 4, 13, 9])], [("y", [1, 8, 7, 9])],
                       [numpy_helper.from_array(w, "w")])
    graph = to_cnn_graph(normalise(model, "rows", {}), "rows", fuse=True)
    split = LayerSplit("conv", rows_for([1, 2, 1], output_rows(graph, "conv")), "rows")
    return graph.onnx, apply_splits(graph, [split], True).onnx


# ---- everywhere, CI included ------------------------------------------------------------

def test_imports_and_refuses_cleanly_without_torch():
    """With torch and onnx2torch made unimportable, the module imports, is the GPU default,
    reports itself unavailable and `prepare` raises BackendError with the reason."""
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "onnx2torch", "torchvision"):
                    raise ImportError(f"No module named {name!r}")
        sys.meta_path.insert(0, Block())
        from onnx import TensorProto, helper
        from hetflow.backends import get_backend
        from hetflow.backends.torch_cuda import TorchCudaBackend
        from hetflow.errors import BackendError
        from hetflow.model.subnet import Subnet
        from hetflow.platform.spec import ProcessingElement
        assert isinstance(get_backend("gpu"), TorchCudaBackend)
        ok, why = TorchCudaBackend.available()
        assert not ok and why.startswith("PyTorch with CUDA is not available"), why
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "t",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
        sub = Subnet("t", ("relu",), helper.make_model(g), ["x"], ["y"])
        try:
            TorchCudaBackend().prepare(sub, ProcessingElement("gpu0", "gpu", (0,), device_index=0))
        except BackendError as e:
            print(e)
        else:
            raise SystemExit("prepare did not raise")
        assert "torch" not in sys.modules
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "torch_cuda cannot run t on gpu0: PyTorch with CUDA is not available: No module " \
           "named 'torch'" in out.stdout


@pytest.mark.skipif(HAS_CUDA, reason="CUDA is available here")
def test_prepare_without_cuda_raises_backend_error():
    with pytest.raises(BackendError, match=r"torch_cuda cannot run t on gpu0: "
                                           r"(PyTorch with CUDA|onnx2torch) is not available"):
        get_backend("gpu").prepare(whole(relu_model()), GPU)
    ok, why = TorchCudaBackend.available()
    assert not ok and "not available" in why


# ---- torch + onnx2torch, on the CPU -----------------------------------------------------

@needs_onnx2torch
@pytest.mark.parametrize("name, parts", [("googlenet", 3), ("tiny_yolo_v2", 2)])
def test_converted_zoo_subnets_match_ort_on_cpu(name, parts):
    import torch

    from hetflow.backends.torch_cuda import to_torch_module

    graph = resolve_model(name)
    feeds = model_input(graph)
    for sub in chunks(graph, parts):
        module = to_torch_module(sub.model, sub.name)
        with torch.inference_mode():
            out = module(*(torch.from_numpy(feeds[i]) for i in sub.inputs))
        outs = dict(zip(sub.outputs, out if isinstance(out, (tuple, list)) else (out,)))
        ref = ort_reference(sub, feeds)
        for t in sub.outputs:
            assert_close(outs[t].numpy(), ref[t], t)
        feeds.update(ref)


@needs_onnx2torch
def test_shape_inference_is_skipped_only_where_every_shape_is_known(monkeypatch):
    import onnx2torch.utils.safe_shape_inference as inference
    import torch

    from hetflow.backends import torch_cuda

    graph = resolve_model("googlenet")
    first, sub = chunks(graph, 3)[:2]
    bare = onnx.ModelProto()
    bare.CopyFrom(sub.model)
    del bare.graph.value_info[:]
    bare.graph.name = "bare"
    assert torch_cuda._shapes_known(sub.model) and not torch_cuda._shapes_known(bare)
    inferred: list[str] = []
    infer = inference.infer_shapes
    monkeypatch.setattr(inference, "infer_shapes",
                        lambda m, **kw: (inferred.append(m.graph.name), infer(m, **kw))[1])
    feeds = model_input(graph)
    feeds.update(ort_reference(first, feeds))
    want = ort_reference(sub, feeds)
    for model in (sub.model, bare):  # the same module either way
        module = torch_cuda.to_torch_module(model, sub.name)
        with torch.inference_mode():
            out = module(*(torch.from_numpy(feeds[i]) for i in sub.inputs))
        outs = dict(zip(sub.outputs, out if isinstance(out, (tuple, list)) else (out,)))
        for t in sub.outputs:
            assert_close(outs[t].numpy(), want[t], t)
    assert inferred == ["bare"]  # the cut with every shape went without inference


@needs_onnx2torch
def test_conversion_draws_no_random_weights_and_leaves_torch_as_it_was(monkeypatch):
    """The converter's Conv and Linear layers skip their random draw (the model's weights
    replace it: googlenet's last cut, with its Gemm, still equals ORT in the test above);
    torch's own layers draw again once the conversion is over."""
    from torch import nn

    from hetflow.backends.torch_cuda import to_torch_module

    draws: list[tuple] = []
    kaiming = nn.init.kaiming_uniform_
    monkeypatch.setattr(nn.init, "kaiming_uniform_",
                        lambda t, *a, **kw: (draws.append(tuple(t.shape)), kaiming(t, *a, **kw))[1])
    graph = resolve_model("googlenet")
    sub = chunks(graph, 3)[-1]
    assert {"Conv", "Gemm"} <= {n.op_type for n in sub.model.graph.node}
    to_torch_module(sub.model, sub.name)
    assert draws == []
    nn.Linear(4, 3)
    nn.Conv2d(2, 2, 3)
    assert draws == [(3, 4), (2, 2, 3, 3)]


@needs_onnx2torch
def test_constant_pads_are_frozen_for_capture():
    """tiny_yolo_v2's Pad reads its pads on the host each run unless frozen (no CUDA graph)."""
    from onnx2torch.node_converters.pad import OnnxPadDynamic, OnnxPadStatic

    from hetflow.backends.torch_cuda import to_torch_module

    module = to_torch_module(onnx.load(resolve_model("tiny_yolo_v2").source))
    kinds = {type(m) for m in module.modules()}
    assert OnnxPadStatic in kinds and OnnxPadDynamic not in kinds
    assert module.pad6.pads == [0, 1, 0, 1, 0, 0, 0, 0]


@needs_onnx2torch
def test_unsupported_op_names_node_and_op_type():
    from hetflow.backends.torch_cuda import to_torch_module

    model = make_model([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                        helper.make_node("GlobalMaxPool", ["a"], ["y"], name="gmp")],
                       [("x", [1, 4, 8, 8])], [("y", [1, 4, 1, 1])])
    with pytest.raises(BackendError, match=r"cannot convert node 'gmp' \(GlobalMaxPool\) of t: "
                                           r"Converter is not implemented"):
        to_torch_module(model, "t")


@needs_onnx2torch
def test_converter_refusal_names_node():
    from hetflow.backends.torch_cuda import to_torch_module

    model = make_model([helper.make_node("MaxPool", ["x"], ["y"], name="pool",
                                         kernel_shape=[2, 2], strides=[2, 2], storage_order=1)],
                       [("x", [1, 4, 8, 8])], [("y", [1, 4, 4, 4])])
    with pytest.raises(BackendError, match=r"node 'pool' \(MaxPool\) of t: .*row major"):
        to_torch_module(model, "t")


@needs_onnx2torch
def test_output_that_is_one_of_several_node_outputs():
    """A sub-network output taken from a Split: onnx2torch alone would return the whole tuple."""
    import torch

    from hetflow.backends.torch_cuda import to_torch_module

    split = numpy_helper.from_array(np.array([1, 3], dtype=np.int64), "split")
    model = make_model([helper.make_node("Split", ["x", "split"], ["a", "b"], name="split", axis=1),
                        helper.make_node("Relu", ["b"], ["y"], name="relu")],
                       [("x", [1, 4, 2, 2])], [("a", [1, 1, 2, 2]), ("y", [1, 3, 2, 2])], [split])
    x = np.random.default_rng(0).standard_normal((1, 4, 2, 2), dtype=np.float32)
    with torch.inference_mode():
        a, y = to_torch_module(model)(torch.from_numpy(x))
    np.testing.assert_array_equal(a.numpy(), x[:, :1])
    np.testing.assert_array_equal(y.numpy(), np.maximum(x[:, 1:], 0))


SLICES = [  # (starts, ends, axes, steps) on a 1x4x6x5 tensor
    ([1], [4], [2], None), ([0, 2], [3, 99], [1, 3], None), ([-4], [-1], [-1], None),
    ([0], [6], [2], [2]), ([1, 0], [4, 5], [2, 3], [2, 3]), ([5], [-99], [2], [-1]),
    ([4, 3], [0, 1], [1, -1], [-2, -1]),
]


@needs_onnx2torch
@pytest.mark.parametrize("starts, ends, axes, steps", SLICES)
def test_constant_slices_are_frozen_for_capture(starts, ends, axes, steps):
    """onnx2torch's Slice reads its bounds on the host each run unless frozen (no CUDA graph);
    frozen, it slices as ONNX Runtime does."""
    import torch
    from onnx2torch.node_converters.slice import OnnxSlice

    from hetflow.backends.torch_cuda import to_torch_module

    consts = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
              (("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps)) if v]
    model = make_model([helper.make_node("Slice", ["x"] + [c.name for c in consts], ["y"],
                                         name="slice")], [("x", [1, 4, 6, 5])], [("y", None)],
                       consts)
    module = to_torch_module(model)
    kinds = {type(m).__name__ for m in module.modules()}
    assert "StaticSlice" in kinds and not any(isinstance(m, OnnxSlice) for m in module.modules())
    x = np.arange(120, dtype=np.float32).reshape(1, 4, 6, 5)
    with torch.inference_mode():
        got = module(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, ort_reference(whole(model), {"x": x})["y"])


@needs_onnx2torch
def test_constant_shapes_axes_and_scalar_indices_are_frozen_for_capture():
    """ShuffleNet's channel shuffle and ViT's attention: a Reshape of a constant shape (with 0
    and -1), a Squeeze of constant axes (opset 13) and Gathers of a constant scalar index and
    of an index tensor. onnx2torch reads the first three on the host each run (no CUDA graph)
    unless frozen; frozen, the module computes what ONNX Runtime does."""
    import torch
    from onnx2torch.node_converters.gather import OnnxGather
    from onnx2torch.node_converters.reshape import OnnxReshape
    from onnx2torch.node_converters.squeeze import OnnxSqueezeDynamicAxes

    from hetflow.backends.torch_cuda import to_torch_module

    consts = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
              (("shape", [0, 2, 2, -1]), ("axes", [1]), ("i", -1), ("idx", [2, 0]))]
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["r"], name="shuffle"),  # 1x4x3x2 -> 1x2x2x6
         helper.make_node("Gather", ["r", "i"], ["g"], name="pick", axis=2),  # -> 1x2x6
         helper.make_node("Unsqueeze", ["g", "axes"], ["u"], name="unsq"),    # -> 1x1x2x6
         helper.make_node("Squeeze", ["u", "axes"], ["q"], name="sq"),        # -> 1x2x6
         helper.make_node("Gather", ["q", "idx"], ["y"], name="take", axis=2)],  # -> 1x2x2
        [("x", [1, 4, 3, 2])], [("y", [1, 2, 2])], consts)
    module = to_torch_module(model)
    names = {type(m).__name__ for m in module.modules()}
    assert {"StaticReshape", "StaticSelect", "OnnxSqueezeStaticAxes"} <= names
    assert not any(isinstance(m, (OnnxReshape, OnnxSqueezeDynamicAxes)) for m in module.modules())
    assert sum(isinstance(m, OnnxGather) for m in module.modules()) == 1  # the index tensor's
    x = np.random.default_rng(0).standard_normal((1, 4, 3, 2), dtype=np.float32)
    with torch.inference_mode():
        got = module(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, ort_reference(whole(model), {"x": x})["y"])


@needs_onnx2torch
def test_a_row_split_layer_converts_and_equals_the_unsplit_one():
    import torch

    from hetflow.backends.torch_cuda import to_torch_module

    unsplit, split = row_split_model()
    module = to_torch_module(split)
    assert sum(type(m).__name__ == "StaticSlice" for m in module.modules()) == 3
    x = np.random.default_rng(0).standard_normal((1, 4, 13, 9), dtype=np.float32)
    with torch.inference_mode():
        got = module(torch.from_numpy(x)).numpy()
    assert_close(got, ort_reference(whole(unsplit), {"x": x})["y"], "y")


# ---- a CUDA GPU ---------------------------------------------------------------------------

@needs_cuda
@pytest.mark.parametrize("name, parts", [("googlenet", 3), ("tiny_yolo_v2", 2)])
def test_gpu_subnets_match_ort(name, parts):
    graph = resolve_model(name)
    feeds = model_input(graph)
    backend = get_backend("gpu")
    for sub in chunks(graph, parts):
        runner = backend.prepare(sub, GPU)
        try:
            assert runner.mode == "cuda_graph", runner.fallback_reason
            assert runner.caller_cores == (0,)
            out = runner.run(feeds)
        finally:
            runner.close()
        ref = ort_reference(sub, feeds)
        assert list(out) == sub.outputs
        for t in sub.outputs:
            assert out[t].dtype == np.float32
            assert_close(out[t], ref[t], t)
        feeds.update(out)  # the next stage reads what this GPU stage produced


@needs_cuda
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_channels_last_stages_equal_nchw_ones_and_keep_nchw_borders(precision):
    """googlenet in three stages, each run channels-last (its 4-D borders too): every output
    has the NCHW shape and layout of the stage's ONNX outputs and is within the precision's
    rounding of the same stage run NCHW, at a batch of 2."""
    graph = resolve_model("googlenet")
    backend = get_backend("gpu")
    el = ProcessingElement(name="gpu0", kind="gpu", cores=(0,), device_index=0,
                           precision=precision)
    frames = [model_input(graph, seed) for seed in (0, 1)]
    for sub in chunks(graph, 3):
        got = {}
        for cl in (False, True):
            runner = backend.prepare_lanes(sub, el, 1, batch=2, channels_last=cl)[0]
            try:
                assert runner.mode == "cuda_graph", runner.fallback_reason
                got[cl] = runner.run_frames(frames)
            finally:
                runner.close()
        for nchw, nhwc in zip(got[False], got[True]):
            for t in sub.outputs:
                assert nhwc[t].shape == nchw[t].shape and nhwc[t].flags.c_contiguous
                scale = float(np.abs(nchw[t]).max()) or 1.0
                tol = 1e-3 if precision == "fp32" else 3e-2
                np.testing.assert_allclose(nhwc[t], nchw[t], atol=tol * scale, rtol=tol)
        frames = [{**f, **o} for f, o in zip(frames, got[False])]


@needs_cuda
def test_lanes_added_like_a_runner_share_its_weights_and_equal_it():
    graph = resolve_model("googlenet")
    sub = chunks(graph, 2)[0]
    backend = get_backend("gpu")
    first = backend.prepare_lanes(sub, GPU, 1)
    more = backend.prepare_lanes(sub, GPU, 2, like=first[0])
    try:
        assert all(r._module is first[0]._module for r in more)
        feeds = model_input(graph)
        want = first[0].run(feeds)
        for r in more:
            got = r.run(feeds)
            for t in sub.outputs:
                np.testing.assert_array_equal(got[t], want[t])
    finally:
        for r in (*first, *more):
            r.close()


@needs_cuda
@pytest.mark.parametrize("sync", ["spin", "block"])
def test_lanes_in_flight_from_one_thread_give_each_frame_its_own_outputs(sync):
    """Four lanes launched back to back on different frames, then collected in launch order
    (InFlight, as the runtime drives them): each frame's outputs equal a one-at-a-time run."""
    from hetflow.backends.inflight import InFlight

    graph = resolve_model("googlenet")
    sub = chunks(graph, 2)[0]
    lanes = get_backend("gpu").prepare_lanes(sub, GPU, 4, sync=sync)
    rng = np.random.default_rng(0)
    frames = [{t: rng.standard_normal(s).astype(np.float32)
               for t, s in zip(lanes[0].inputs, lanes[0].input_shapes)} for _ in range(10)]
    try:
        want = [lanes[0].run(f) for f in frames]
        lanes[1].submit(frames[3])
        lanes[1].wait()
        assert lanes[1].finished()
        for t in sub.outputs:
            np.testing.assert_array_equal(lanes[1].collect()[t], want[3][t])
        runs, got = InFlight(lanes), {}
        for i, f in enumerate(frames):
            if not runs.has_room():
                j, out = runs.collect()
                got[j] = out
            runs.submit(f, i)
        while len(runs):
            j, out = runs.collect()
            got[j] = out
        assert sorted(got) == list(range(10))
        for i in range(10):
            for t in sub.outputs:
                np.testing.assert_array_equal(got[i][t], want[i][t])
    finally:
        for r in lanes:
            r.close()


@needs_cuda
def test_graph_replay_equals_eager_and_outputs_stay_valid():
    graph = resolve_model("googlenet")
    sub = chunks(graph, 2)[0]
    rng = np.random.default_rng(1)
    frames = [{"input": rng.standard_normal(graph.tensors["input"].shape, dtype=np.float32)}
              for _ in range(3)]
    backend = get_backend("gpu")
    graphed = backend.prepare(sub, GPU, cuda_graph=True)
    eager = backend.prepare(sub, GPU, cuda_graph=False)
    try:
        assert (graphed.mode, eager.mode) == ("cuda_graph", "eager")
        kept = [graphed.run(f) for f in frames]  # earlier results must survive later runs
        for f, got in zip(frames, kept):
            want = eager.run(f)
            for t in sub.outputs:
                scale = max(1.0, float(np.abs(want[t]).max()))  # equal up to summation order
                np.testing.assert_allclose(got[t] / scale, want[t] / scale, rtol=1e-5, atol=1e-5,
                                           err_msg=t)
        assert not np.allclose(kept[0][sub.outputs[0]], kept[1][sub.outputs[0]])
    finally:
        graphed.close()
        eager.close()


@needs_cuda
def test_border_copies_in_the_graph_equal_them_outside_and_leave_the_callers_stream():
    """A run that is one launch (the border copies captured with the forward) gives the same
    outputs as one whose copies are launched beside the graph, frame after frame, and the
    caller's current stream is the same after submit as before."""
    import torch

    graph = resolve_model("googlenet")
    sub = chunks(graph, 3)[1]  # a middle piece: several inputs and outputs cross its border
    backend = get_backend("gpu")
    inside = backend.prepare_lanes(sub, GPU, 2, graph_copies=True)
    outside = backend.prepare_lanes(sub, GPU, 1, graph_copies=False, like=inside[0])[0]
    rng = np.random.default_rng(2)
    frames = [{t: rng.standard_normal(s).astype(np.float32)
               for t, s in zip(outside.inputs, outside.input_shapes)} for _ in range(4)]
    mine = torch.cuda.Stream()
    try:
        assert all(r.copies_in_graph and r.mode == "cuda_graph" for r in inside)
        assert not outside.copies_in_graph
        with torch.cuda.stream(mine):
            for lane, f in zip(inside * 2, frames):
                lane.submit(f)
                assert torch.cuda.current_stream() == mine
                got, want = lane.collect(), outside.run(f)
                for t in sub.outputs:
                    np.testing.assert_array_equal(got[t], want[t])
    finally:
        for r in (*inside, outside):
            r.close()


@needs_cuda
def test_a_row_split_layer_is_captured_and_equals_the_unsplit_one():
    unsplit, split = row_split_model()
    x = np.random.default_rng(0).standard_normal((1, 4, 13, 9), dtype=np.float32)
    runner = get_backend("gpu").prepare(whole(split), GPU)
    try:
        assert runner.mode == "cuda_graph", runner.fallback_reason
        got = runner.run({"x": x})["y"]
    finally:
        runner.close()
    assert_close(got, ort_reference(whole(unsplit), {"x": x})["y"], "y")


@needs_cuda
def test_uncapturable_forward_falls_back_to_eager():
    """onnx2torch's Reshape reads a shape that a node computes (here a Constant node, which
    the conversion does not freeze) on the host: no capture, eager still right."""
    shape = numpy_helper.from_array(np.array([1, 16], dtype=np.int64), "value")
    model = make_model([helper.make_node("Constant", [], ["shape"], name="c", value=shape),
                        helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
                       [("x", [1, 4, 2, 2])], [("y", [1, 16])])
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 2, 2)
    with pytest.warns(RuntimeWarning, match="cannot be captured as a CUDA graph"):
        runner = get_backend("gpu").prepare(whole(model), GPU)
    try:
        assert runner.mode == "eager" and runner.fallback_reason
        np.testing.assert_array_equal(runner.run({"x": x})["y"], x.reshape(1, 16))
    finally:
        runner.close()


@needs_cuda
def test_bad_feeds_and_elements_raise_backend_error():
    backend = get_backend("gpu")
    sub = whole(relu_model())
    with pytest.raises(BackendError, match="runs on GPU elements, not on 'cpu0'"):
        backend.prepare(sub, ProcessingElement(name="cpu0", kind="cpu", cores=(0,)))
    with pytest.raises(BackendError, match="names CUDA device 99"):
        backend.prepare(sub, ProcessingElement(name="gpu99", kind="gpu", cores=(0,),
                                               device_index=99))
    runner = backend.prepare(sub, GPU)
    try:
        with pytest.raises(BackendError, match="input 'x' was not given"):
            runner.run({})
        with pytest.raises(BackendError, match=r"input 'x' has shape \(4,\), expected"):
            runner.run({"x": np.zeros(4, np.float32)})
    finally:
        runner.close()


@needs_cuda
def test_a_runner_on_a_stream_of_higher_priority_gives_the_same_outputs():
    import torch

    x = np.random.default_rng(0).standard_normal((1, 4, 8, 8), dtype=np.float32)
    runner = get_backend("gpu").prepare(whole(relu_model()), GPU)
    try:
        low, high = torch.cuda.Stream.priority_range()
        runner.set_priority(0, 3)
        assert runner.stream_priority == high and runner._stream.priority == high
        np.testing.assert_array_equal(runner.run({"x": x})["y"], np.maximum(x, 0))
        runner.set_priority(2, 3)
        assert runner.stream_priority == low
        np.testing.assert_array_equal(runner.run({"x": -x})["y"], np.maximum(-x, 0))
    finally:
        runner.close()


def fp16_file(path) -> str:
    """A small CNN as `model.half()` exports it: float16 weights, input and output."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float16), n)
             for n, shape in (("w1", (8, 3, 3, 3)), ("w2", (16, 8, 3, 3)))]
    nodes = [helper.make_node("Conv", ["input", "w1"], ["a"], name="conv1", pads=[1] * 4),
             helper.make_node("Relu", ["a"], ["b"], name="relu1"),
             helper.make_node("Conv", ["b", "w2"], ["c"], name="conv2", pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["d"], name="relu2"),
             helper.make_node("GlobalAveragePool", ["d"], ["e"], name="gap"),
             helper.make_node("Flatten", ["e"], ["output"], name="flat")]
    g = helper.make_graph(nodes, "half", [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT16, [1, 3, 16, 16])], [helper.make_tensor_value_info(
            "output", TensorProto.FLOAT16, [1, 16])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return str(path)


@needs_cuda
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_an_fp16_file_crosses_its_borders_in_float16_and_feeds_a_cpu_stage(precision,
                                                                             tmp_path):
    """An fp16 file split in two: the GPU stage (computing at `precision`) takes and gives
    float16, as the file's tensors are, and the CPU stage after it runs on what it gave; the
    output is within fp16 rounding of ONNX Runtime running the file whole."""
    from hetflow.model import load_model

    graph = load_model(fp16_file(tmp_path / "half.onnx"))
    first, second = chunks(graph, 2)
    feeds = {"input": np.random.default_rng(0).standard_normal((1, 3, 16, 16))
             .astype(np.float16)}
    gpu = ProcessingElement(name="gpu0", kind="gpu", cores=(0,), device_index=0,
                            precision=precision)
    runner = get_backend("gpu").prepare(first, gpu)
    try:
        mid = runner.run(feeds)
    finally:
        runner.close()
    assert all(a.dtype == np.float16 for a in mid.values())
    cpu = get_backend("cpu").prepare(second, ProcessingElement("cpu0", "cpu", (0,)))
    out = cpu.run({**feeds, **mid})["output"]
    want = ort_reference(extract_subnet(graph, [l.name for l in graph.layers]), feeds)["output"]
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float32), want.astype(np.float32), rtol=2e-2,
                               atol=2e-2 * float(np.abs(want).max()))


def test_the_fp16_file_runs_on_cpu_split_as_the_gpu_test_splits_it(tmp_path):
    """The CPU half of the test above, where there is no GPU: the file's two stages on ONNX
    Runtime give the whole file's output (so a failure there is the GPU stage's)."""
    from hetflow.model import load_model

    graph = load_model(fp16_file(tmp_path / "half.onnx"))
    feeds = {"input": np.ones((1, 3, 16, 16), np.float16)}
    local = dict(feeds)
    for sub in chunks(graph, 2):
        local.update(ort_reference(sub, local))
    want = ort_reference(extract_subnet(graph, [l.name for l in graph.layers]), feeds)
    assert local["output"].dtype == np.float16
    np.testing.assert_allclose(local["output"].astype(np.float32),
                               want["output"].astype(np.float32), rtol=1e-2,
                               atol=1e-3 * float(np.abs(want["output"]).max()))
