"""Runner reuse: one build per (model, layers, element) inside a scope, nothing closed while a
caller holds it, everything closed when the scope ends; outside a scope, fresh runners."""
import os

import numpy as np
import onnx
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

from hetflow.backends import register_backend, registered_backends
from hetflow.backends.ort_cpu import OrtCpuBackend
from hetflow.backends.reuse import release, reusing_runners, runners_for
from hetflow.model import load_model
from hetflow.platform import ProcessingElement

NAME = "reuse_test"
CORE = min(os.sched_getaffinity(0))


class Recording(OrtCpuBackend):
    """ONNX Runtime runners that remember being built and closed."""

    name = NAME
    built: list = []
    lane_calls: list = []
    likes: list = []

    def prepare(self, subnet, element, **opts):
        r = super().prepare(subnet, element, **opts)
        r.closed = False
        inner_close = r.close

        def close():
            assert not r.closed, "closed twice"
            r.closed = True
            inner_close()

        r.close = close
        Recording.built.append(r)
        return r

    def prepare_lanes(self, subnet, element, lanes, like=None, **opts):
        Recording.lane_calls.append(lanes)
        Recording.likes.append(like)
        return super().prepare_lanes(subnet, element, lanes, **opts)

    def share_key(self, element):  # each element its own session here (see `Sharing`)
        return None


if NAME not in registered_backends():
    register_backend(NAME, Recording)


def element(i: int) -> ProcessingElement:
    return ProcessingElement(f"e{i}", "cpu", (CORE,), cluster="cpu", backend=NAME)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "tiny",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path_factory.mktemp("m") / "tiny.onnx"
    onnx.save(m, path)
    return load_model(path, fuse=False)


@pytest.fixture(autouse=True)
def fresh_records():
    Recording.built.clear()
    Recording.lane_calls.clear()
    Recording.likes.clear()


def test_outside_a_scope_every_call_builds_and_release_closes(graph):
    a = runners_for(graph, ["conv"], element(0))
    b = runners_for(graph, ["conv"], element(0))
    assert a[0] is not b[0] and len(Recording.built) == 2
    release([*a, *b])
    assert all(r.closed for r in Recording.built)


def test_inside_a_scope_the_same_layers_on_the_same_element_are_built_once(graph):
    x = np.ones((1, 4, 8, 8), np.float32)
    with reusing_runners() as scope:
        a = runners_for(graph, ["conv", "relu"], element(0))
        want = a[0].run({"x": x})["y"]
        release(a)
        b = runners_for(graph, ["conv", "relu"], element(0))
        c = runners_for(graph, ["conv"], element(0))  # other layers: another runner
        d = runners_for(graph, ["conv", "relu"], element(1))  # another element: another
        assert b[0] is a[0] and c[0] is not a[0] and d[0] is not a[0]
        np.testing.assert_array_equal(b[0].run({"x": x})["y"], want)
        release([*b, *c, *d])
        assert not any(r.closed for r in Recording.built)
        assert (scope.built, scope.reused) == (3, 1)
    assert len(Recording.built) == 3 and all(r.closed for r in Recording.built)


def test_lanes_come_from_one_pool_per_element(graph):
    with reusing_runners():
        one = runners_for(graph, ["conv"], element(0), lanes=1)
        three = runners_for(graph, ["conv"], element(0), lanes=3)
        two = runners_for(graph, ["conv"], element(0), lanes=2)
        assert three[0] is one[0] and two == three[:2] and len(set(map(id, three))) == 3
        assert Recording.lane_calls == [2]  # the pool grew once, by the two lanes it lacked
        assert Recording.likes == [one[0]]  # over the weights of the pool's first runner
        release([*one, *three, *two])


def test_a_nested_scope_is_the_outer_one(graph):
    with reusing_runners() as outer:
        with reusing_runners() as inner:
            r = runners_for(graph, ["conv"], element(0))
            release(r)
        assert inner is outer and not r[0].closed
    assert r[0].closed


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["take", "release"]), st.integers(0, 3)),
                max_size=25),
       st.integers(0, 3))
def test_a_bounded_scope_never_closes_what_a_caller_holds(graph, ops, keep):
    """Random takes and releases over four keys with room for about `keep` models: a runner
    handed out is open until released; released ones may be closed (evicted) but are never
    handed out again once closed; the scope's end closes every runner exactly once."""
    Recording.built.clear()
    size = len(graph.onnx.SerializeToString())
    held: dict[int, list] = {}
    with reusing_runners(max_bytes=keep * size):
        for op, k in ops:
            if op == "take" and k not in held:
                got = runners_for(graph, ["conv"], element(k))
                assert not got[0].closed
                held[k] = got
            elif op == "release" and k in held:
                release(held.pop(k))
            for rs in held.values():
                assert not rs[0].closed
        for rs in held.values():
            release(rs)
    assert all(r.closed for r in Recording.built)  # and none twice (the close asserts it)


class Slow(Recording):
    """Recording runners that take a while to build, noting the threads that built them."""

    name = NAME + "_slow"
    threads: set = set()
    fail_on: str | None = None

    def prepare(self, subnet, element, **opts):
        import threading
        import time

        Slow.threads.add(threading.get_ident())
        time.sleep(0.05)
        if element.name == Slow.fail_on:
            raise ValueError(f"cannot build on {element.name}")
        return super().prepare(subnet, element, **opts)


if Slow.name not in registered_backends():
    register_backend(Slow.name, Slow)


def slow_element(i: int) -> ProcessingElement:
    return ProcessingElement(f"s{i}", "cpu", (CORE,), cluster="cpu", backend=Slow.name)


def test_many_cpu_runners_are_built_by_several_threads_in_order(graph):
    from hetflow.backends.reuse import runners_for_many

    Slow.threads.clear()
    Slow.fail_on = None
    els = [slow_element(i) for i in range(6)]
    with reusing_runners():
        got = runners_for_many(graph, [(["conv"], e, 1, None) for e in els], threads=3)
        assert [rs[0].element.name for rs in got] == [e.name for e in els]
        assert 1 < len(Slow.threads) <= 3
        # the scope keeps them: asked again, nothing is built
        n = len(Recording.built)
        again = runners_for_many(graph, [(["conv"], e, 1, None) for e in els])
        assert [a[0] for a in again] == [g[0] for g in got] and len(Recording.built) == n
        release(r for rs in [*got, *again] for r in rs)


def test_a_failed_build_gives_back_the_others_and_raises_the_first_error(graph):
    from hetflow.backends.reuse import runners_for_many

    Slow.fail_on = "s2"
    try:
        with pytest.raises(ValueError, match="cannot build on s2"):
            runners_for_many(graph, [(["conv"], slow_element(i), 1, None) for i in range(4)])
    finally:
        Slow.fail_on = None
    assert len(Recording.built) == 3 and all(r.closed for r in Recording.built)


class Sharing(Slow):
    """Slow recording runners that single cores share, as ONNX Runtime's do."""

    name = NAME + "_sharing"

    def share_key(self, element):
        return OrtCpuBackend.share_key(self, element)


if Sharing.name not in registered_backends():
    register_backend(Sharing.name, Sharing)


def test_single_cores_share_one_session_built_once_by_the_first_thread(graph):
    from hetflow.backends.reuse import runners_for_many

    els = [ProcessingElement(f"h{i}", "cpu", (CORE,), cluster="cpu", backend=Sharing.name)
           for i in range(5)]
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    fresh = OrtCpuBackend().prepare(extract(graph, ["conv", "relu"]), els[0])
    want = fresh.run({"x": x})["y"]
    with reusing_runners() as scope:
        got = [rs[0] for rs in runners_for_many(graph, [(["conv", "relu"], e, 1, None)
                                                       for e in els], threads=4)]
        assert len(Recording.built) == 1 and scope.built == 5
        assert [r.element.name for r in got] == [e.name for e in els]
        assert len({id(r) for r in got}) == 5 and len({id(r.session) for r in got}) == 1
        for r in got:  # each runs the whole sub-network
            np.testing.assert_allclose(r.run({"x": x})["y"], want, rtol=1e-6)
        other = runners_for(graph, ["conv"], els[1])  # other layers: their own session
        assert other[0].session is not got[0].session and len(Recording.built) == 2
        release([*got, *other])
    assert Recording.built[0].closed


def test_a_closed_session_is_not_shared_and_multi_core_or_profiling_sessions_never_are(graph):
    b = OrtCpuBackend()
    one = ProcessingElement("c0", "cpu", (CORE,), cluster="cpu")
    other = ProcessingElement("c1", "cpu", (CORE + 1,), cluster="cpu")
    two = ProcessingElement("c01", "cpu", (CORE, CORE + 1), cluster="cpu")
    gpu = ProcessingElement("gpu0", "gpu", (CORE,), cluster="gpu")
    assert b.share_key(one) == b.share_key(other) is not None
    assert b.share_key(two) is None and b.share_key(gpu) is None
    sub = extract(graph, ["conv"])
    r = b.prepare(sub, one)
    view = b.prepare_like(r, other)
    assert view is not None and view.session is r.session and view.element is other
    assert b.prepare_like(r, two) is None
    r.close()
    assert b.prepare_like(r, other) is None
    assert view.session is not None  # closing one runner leaves the others' session alone


def test_a_profiling_session_is_not_shared(graph, tmp_path):
    b = OrtCpuBackend()
    one = ProcessingElement("c0", "cpu", (CORE,), cluster="cpu")
    r = b.prepare(extract(graph, ["conv"]), one, profile_prefix=str(tmp_path / "p"))
    assert b.prepare_like(r, ProcessingElement("c1", "cpu", (CORE,), cluster="cpu")) is None


def extract(graph, layers):
    from hetflow.model.subnet import extract_subnet

    return extract_subnet(graph, layers)
