"""Batched runners (backends.batching): a runner of batch b fires on 1..b frames, padding the
rest with the last frame; each frame's outputs equal a single-frame run's and the padding's
never come back."""
import importlib.util
import time

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import fake_gpu
from hetflow.backends import get_backend
from hetflow.backends.batching import batched_model, batched_subnet
from hetflow.backends.inflight import InFlight
from hetflow.backends.reuse import release, reusing_runners, runners_for
from hetflow.errors import BackendError
from hetflow.model import load_model
from hetflow.model.subnet import Subnet, extract_subnet
from hetflow.platform import ProcessingElement

CPU = ProcessingElement(name="cpu0", kind="cpu", cores=(0,), cluster="cpu")


def reshape_model(target=(1, -1)) -> onnx.ModelProto:
    """x[1,3,6,6] -> conv(4) -> relu -> reshape(target) -> matmul(144x5) -> y[1,5]: a Reshape
    whose constant target pins batch 1, as exported classifiers have."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(target, np.int64), "shape"),
             numpy_helper.from_array(rng.standard_normal((144, 5)).astype(np.float32), "fc")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fc"], ["y"], name="fc")]
    g = helper.make_graph(nodes, "flat",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def whole(model: onnx.ModelProto) -> Subnet:
    return Subnet("flat", tuple(n.name for n in model.graph.node), model, ["x"], ["y"])


SUB = whole(reshape_model())
_RUNNERS: dict[int, object] = {}


def runner(batch: int):
    if batch not in _RUNNERS:
        _RUNNERS[batch] = get_backend("cpu").prepare(SUB, CPU, batch=batch)
    return _RUNNERS[batch]


def frames_of(seed: int, n: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)} for _ in range(n)]


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 8), data=st.data(), seed=st.integers(0, 2**16))
def test_batched_frames_equal_single_frame_runs(batch, data, seed):
    n = data.draw(st.integers(1, batch), label="frames")
    frames = frames_of(seed, n)
    got = runner(batch).run_frames(frames)
    assert len(got) == n  # the padding's outputs are dropped
    for frame, out in zip(frames, got):
        want = runner(1).run(frame)
        assert out["y"].shape == (1, 5)
        np.testing.assert_allclose(out["y"], want["y"], rtol=1e-5, atol=1e-5)


def test_padding_repeats_the_last_frame_and_never_leaks():
    full = frames_of(1, 4)
    r = runner(4)
    r.run_frames(full)  # rows 2 and 3 of the session's input hold other frames before this
    two = r.run_frames(full[:2])
    assert len(two) == 2
    for frame, out in zip(full[:2], two):
        np.testing.assert_allclose(out["y"], runner(1).run(frame)["y"], rtol=1e-5, atol=1e-5)
    # one frame on a batched runner: `run` pads it and gives its own outputs
    np.testing.assert_allclose(r.run(full[3])["y"], runner(1).run(full[3])["y"], rtol=1e-5,
                               atol=1e-5)


def test_more_frames_than_the_batch_or_none_are_refused():
    with pytest.raises(BackendError, match=r"5 frames for a batch of 4"):
        runner(4).run_frames(frames_of(0, 5))
    with pytest.raises(BackendError, match=r"0 frames for a batch of 4"):
        runner(4).run_frames([])
    with pytest.raises(BackendError, match=r"input 'x' of a frame has shape \(2, 3, 6, 6\)"):
        runner(4).run_frames([{"x": np.zeros((2, 3, 6, 6), np.float32)}])


def test_batch_must_be_positive():
    with pytest.raises(BackendError, match=r"ort_cpu on cpu0: batch must be a positive integer"):
        get_backend("cpu").prepare(SUB, CPU, batch=0)


def test_reshape_that_pins_batch_one_is_rewritten_and_others_kept():
    m = batched_model(SUB, 8)
    flat = next(n for n in m.graph.node if n.name == "flat")
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    assert inits[flat.input[1]].tolist() == [8, -1]
    assert inits["shape"].tolist() == [1, -1]  # the original tensor is left for others
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 8
    assert m.graph.output[0].type.tensor_type.shape.dim[0].dim_value == 8
    kept = batched_model(whole(reshape_model((0, 144))), 8)
    assert [n.input[1] for n in kept.graph.node if n.op_type == "Reshape"] == ["shape"]


def test_reshape_that_joins_frames_is_a_backend_error_naming_the_node():
    joined = whole(reshape_model((144, -1)))
    with pytest.raises(BackendError, match=r"node 'flat' \(Reshape\) of sub-network flat: "
                                           r"target shape \[144, -1\] pins the frames"):
        batched_subnet(joined, 2)


def test_batch_one_is_the_sub_network_itself():
    assert batched_subnet(SUB, 1) is SUB


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "flat.onnx"
    onnx.save(reshape_model(), path)
    return load_model(path)


def test_reuse_keeps_one_pool_per_batch(graph):
    layers = [l.name for l in graph.layers]
    with reusing_runners() as scope:
        (one,) = runners_for(graph, layers, CPU)
        (four,) = runners_for(graph, layers, CPU, batch=4)
        release([one, four])
        (again,) = runners_for(graph, layers, CPU, batch=4)
        release([again])
        assert (one.batch, four.batch) == (1, 4) and again is four
        assert scope.built == 2 and scope.reused == 1


def test_fake_gpu_lanes_fire_batches_with_real_outputs_and_its_time_model(graph):
    layers = [l.name for l in graph.layers]
    gpu = fake_gpu.gpu()
    fake_gpu.reset(slow=0.02, a=0.5)
    try:
        lanes = runners_for(graph, layers, gpu, lanes=2, batch=4)
        sub = extract_subnet(graph, layers)
        single = get_backend("cpu").prepare(sub, CPU)
        runs = InFlight(lanes)
        firings = [frames_of(2, 4), frames_of(3, 3)]
        t0 = time.perf_counter()
        for i, frames in enumerate(firings):
            runs.submit_frames(frames, tag=i)
        got = dict(runs.collect() for _ in firings)
        took = time.perf_counter() - t0
        assert fake_gpu.IN_FLIGHT["max"] == 2
        # t(4) = 0.02 * (0.5 + 0.5 * 4) = 0.05 s; the two lanes overlap
        assert fake_gpu.firing_seconds(4) == pytest.approx(0.05)
        assert 0.05 <= took < 0.1
        for i, frames in enumerate(firings):
            assert len(got[i]) == len(frames)
            for frame, out in zip(frames, got[i]):
                np.testing.assert_allclose(out["y"], single.run(frame)["y"], rtol=1e-5,
                                           atol=1e-5)
        release(lanes)
    finally:
        fake_gpu.reset()


def test_fake_gpu_time_model_is_checked():
    with pytest.raises(ValueError, match=r"a=1.5 is outside"):
        fake_gpu.reset(0.01, a=1.5)


@pytest.mark.skipif(importlib.util.find_spec("onnx2torch") is None,
                    reason="torch and onnx2torch are not installed")
def test_converted_batched_module_carries_the_batch_on_cpu():
    import torch

    from hetflow.backends.torch_cuda import to_torch_module

    module = to_torch_module(batched_model(SUB, 3), "flat")
    frames = frames_of(4, 3)
    with torch.inference_mode():
        y = module(torch.from_numpy(np.concatenate([f["x"] for f in frames]))).numpy()
    assert y.shape == (3, 5)
    for i, frame in enumerate(frames):
        np.testing.assert_allclose(y[i:i + 1], runner(1).run(frame)["y"], rtol=1e-4, atol=1e-4)


def test_an_output_that_does_not_carry_the_batch_is_a_backend_error():
    """A ReduceSum over the frames' axis: its output has leading dim 1 at any batch."""
    m = helper.make_model(helper.make_graph(
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="sum", keepdims=1)], "sum",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.array([0], np.int64), "axes")]),
        opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    sub = Subnet("sum", ("sum",), m, ["x"], ["y"])
    r = get_backend("cpu").prepare(sub, CPU, batch=3)
    with pytest.raises(BackendError, match=r"sub-network sum on cpu0 \(batch 3\).*'y'"):
        r.run_frames([{"x": np.ones((1, 4), np.float32)}])
