import os
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetflow.backends import (Backend, backend_for, get_backend, pin_current_thread, pinned,
                              register_backend)
from hetflow.backends.ort_cpu import OrtCpuBackend, OrtCpuRunner
from hetflow.errors import BackendError
from hetflow.model import load_model
from hetflow.model.subnet import Subnet, extract_subnet
from hetflow.platform import ProcessingElement, detect_platform

CORES = sorted(os.sched_getaffinity(0))


def cpu(cores) -> ProcessingElement:
    return ProcessingElement(name=f"cpu{cores}", kind="cpu", cores=tuple(cores), cluster="cpu")


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """x -> conv -> relu -> conv -> y (3x3 convs on 4 channels, 8x8)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"], name="relu1"),
             helper.make_node("Conv", ["b", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "tiny",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [w1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path_factory.mktemp("m") / "tiny.onnx"
    onnx.save(m, path)
    return load_model(path)


def thread_affinities() -> dict[int, str]:
    out = {}
    for t in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            status = (t / "status").read_text()
        except FileNotFoundError:  # the thread ended while we listed them
            continue
        for line in status.splitlines():
            if line.startswith("Cpus_allowed_list"):
                out[int(t.name)] = line.split()[1]
    return out


def test_registry():
    assert isinstance(get_backend("cpu"), OrtCpuBackend)
    assert isinstance(get_backend("ort_cpu"), OrtCpuBackend)
    with pytest.raises(ValueError, match="already registered"):
        register_backend("ort_cpu", OrtCpuBackend)
    with pytest.raises(BackendError, match="no backend 'opencl'"):
        get_backend("opencl")
    npu = ProcessingElement(name="npu", kind="accel", cores=(), backend="none", model="NPU")
    with pytest.raises(BackendError, match="element 'npu' .* has no hetflow backend"):
        backend_for(npu)
    assert isinstance(backend_for(cpu([0])), OrtCpuBackend)


def test_a_new_backend_registers_once():
    class Echo(Backend):
        name = "echo-test"
        kinds = ("accel",)

        def prepare(self, subnet, element, **opts):
            raise NotImplementedError

    register_backend("echo-test", Echo)
    assert isinstance(get_backend("echo-test"), Echo)
    with pytest.raises(ValueError):
        register_backend("echo-test", Echo)


def test_runs_a_subnet_pinned_to_one_core(graph):
    core = CORES[-1]
    sub = extract_subnet(graph, ["conv1", "relu1"])
    runner = get_backend("cpu").prepare(sub, cpu([core]))
    assert isinstance(runner, OrtCpuRunner) and runner.caller_cores == (core,)
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    seen = {}

    def work():
        pin_current_thread(runner.caller_cores)
        seen["affinity"] = os.sched_getaffinity(0)
        seen["out"] = runner.run({"x": x})

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen["affinity"] == {core}
    assert list(seen["out"]) == ["b"]  # 'a' is read inside the sub-network only
    assert seen["out"]["b"].shape == (1, 4, 8, 8) and seen["out"]["b"].min() >= 0
    runner.close()


@pytest.mark.skipif(len(CORES) < 2, reason="needs 2 cores")
def test_pool_threads_are_pinned_to_the_other_cores(graph):
    sub = extract_subnet(graph, ["conv1", "relu1", "conv2"])
    before = set(thread_affinities())
    runner = get_backend("cpu").prepare(sub, cpu(CORES[:2]))
    with pinned(runner.caller_cores):
        runner.run({"x": np.ones((1, 4, 8, 8), np.float32)})
    # the pool thread pins itself when it first runs, which may be a moment later
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        new = {tid: aff for tid, aff in thread_affinities().items() if tid not in before}
        if str(CORES[1]) in new.values():
            break
        time.sleep(0.02)
    assert str(CORES[1]) in new.values()  # the one pool thread sits on the second core


def test_results_match_the_whole_model(graph):
    x = np.random.default_rng(2).standard_normal((1, 4, 8, 8)).astype(np.float32)
    backend = get_backend("cpu")
    whole = backend.prepare(extract_subnet(graph, ["conv1", "relu1", "conv2"]), cpu([CORES[0]]))
    first = backend.prepare(extract_subnet(graph, ["conv1", "relu1"]), cpu([CORES[0]]))
    second = backend.prepare(extract_subnet(graph, ["conv2"]), cpu([CORES[0]]), spinning=True)
    y = second.run(first.run({"x": x}))["y"]
    np.testing.assert_allclose(y, whole.run({"x": x})["y"], rtol=1e-5, atol=1e-5)


def _model(node, inputs, outputs, inits=(), opsets=(("", 17),)):
    g = helper.make_graph([node], "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 8
    return m


def test_errors_name_the_node():
    x1 = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])]
    y1 = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]
    backend = get_backend("cpu")
    bad = _model(helper.make_node("NoSuchOp", ["x"], ["y"], name="weird"), x1, y1)
    with pytest.raises(BackendError, match=r"cannot run node 'weird' \(NoSuchOp\) of sub-network s"):
        backend.prepare(Subnet("s", ("weird",), bad, ["x"], ["y"]), cpu([0]))
    custom = _model(helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.example"), x1, y1,
                    opsets=(("", 17), ("com.example", 1)))
    with pytest.raises(BackendError, match=r"node 'r' \(com.example:Relu\)"):
        backend.prepare(Subnet("s", ("r",), custom, ["x"], ["y"]), cpu([0]))
    reshape = _model(helper.make_node("Reshape", ["x", "s"], ["y"], name="resh"),
                     [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                     [helper.make_tensor("s", TensorProto.INT64, [1], [4])])
    runner = backend.prepare(Subnet("s", ("resh",), reshape, ["x"], ["y"]), cpu([0]))
    with pytest.raises(BackendError, match=r"failed running node 'resh' \(Reshape\)"):
        runner.run({"x": np.zeros(5, np.float32)})
    with pytest.raises(BackendError, match="input 'x' was not given"):
        runner.run({"z": np.zeros(4, np.float32)})
    gpu = ProcessingElement(name="gpu0", kind="gpu", cores=(0,), device_index=0)
    with pytest.raises(BackendError, match="runs on CPU elements"):
        backend.prepare(Subnet("s", ("resh",), reshape, ["x"], ["y"]), gpu)
    with pytest.raises(BackendError, match="optimization 'max'"):
        backend.prepare(Subnet("s", ("resh",), reshape, ["x"], ["y"]), cpu([0]), optimization="max")


def test_detected_elements_all_have_a_backend():
    for e in detect_platform().elements():
        if e.kind == "cpu":
            assert isinstance(backend_for(e), OrtCpuBackend)


def test_benchmark_times_with_bound_buffers(graph):
    sub = extract_subnet(graph, ["conv1", "relu1"])
    runner = get_backend("cpu").prepare(sub, cpu([CORES[0]]))
    x = np.ones((1, 4, 8, 8), np.float32)
    times = runner.benchmark({"x": x}, repeats=4, warmup=1)
    assert len(times) == 4 and all(t > 0 for t in times)
    np.testing.assert_allclose(runner.run({"x": x})["b"], runner.run({"x": x})["b"])


def test_control_threads_go_where_no_cpu_stage_computes():
    from types import SimpleNamespace as E

    from hetflow.backends import control_cores

    allowed = set(os.sched_getaffinity(0))
    c = sorted(allowed)
    cpu_all = E(kind="cpu", cores=tuple(c))
    gpu = E(kind="gpu", cores=(c[-1],))
    # a GPU driver core that no CPU stage uses, where every other core computes
    assert control_cores([E(kind="cpu", cores=tuple(c[:-1])), gpu]) == {c[-1]}
    if len(c) >= 2:  # a GPU-only plan: the cores no element uses, not its driver's
        assert control_cores([gpu]) == allowed - {c[-1]}
    # every allowed core computes: leave the control threads unpinned
    assert control_cores([cpu_all]) == set()
    assert control_cores([cpu_all, gpu]) == set()  # its driver core computes for the CPU too
    if len(c) >= 2:  # a CPU-only plan on part of the machine: the rest
        assert control_cores([E(kind="cpu", cores=(c[0],))]) == allowed - {c[0]}


def test_the_caller_of_a_cpu_stage_runs_on_its_caller_core(graph):
    """The engines pin the thread that calls a stage where the profiler timed it: on the
    element's first core, off the cores of ONNX Runtime's pool threads."""
    from types import SimpleNamespace as E

    from hetflow.backends import caller_cores_of

    element = ProcessingElement("cpus", "cpu", tuple(CORES), cluster="c")
    runner = get_backend("cpu").prepare(extract_subnet(graph, [graph.layers[0].name]), element)
    try:
        assert caller_cores_of([runner], runner.element) == set(runner.element.cores[:1])
    finally:
        runner.close()
    # something without caller cores: the element's cores
    assert caller_cores_of([object()], E(cores=(3, 4))) == {3, 4}
