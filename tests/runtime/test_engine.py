"""The pipelined runtime: outputs equal the reference frame by frame and in order, for random
CNN DAGs and random mappings (replicated stages included); faults and stalls stop the run with an
error naming where; Ctrl-C returns what was measured."""
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hetflow.errors import RuntimeFault
from hetflow.model.synthetic import random_cnn_graph
from hetflow.runtime.api import run_plan
from hetflow.runtime.check import reference_session
from hetflow.runtime.engine import prepare, run_prepared
from hetflow.runtime.inputs import random_source
from patching import patch_everywhere

GRAPHS = {(n, s): random_cnn_graph(n, s) for n in (8, 16) for s in range(4)}
ACTORS = ["pe0", "pe1", "pe2", "pe0|pe3", "pe1|pe4|pe5"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(GRAPHS)), data=st.data(), policy=st.sampled_from(["paper", "maximal"]),
       capacity=st.integers(1, 3))
def test_pipelined_outputs_equal_reference_in_order(plan_for, key, data, policy, capacity):
    graph = GRAPHS[key]
    # actors must not share elements: draw from a pool of disjoint actors
    pool = data.draw(st.sampled_from([["pe0"], ["pe0", "pe1"], ["pe0", "pe1", "pe2"],
                                      ["pe0|pe3", "pe1"], ["pe1|pe4|pe5", "pe0|pe3", "pe2"]]))
    assignment = {l.name: data.draw(st.sampled_from(pool)) for l in graph.layers}
    plan = plan_for(graph, assignment, capacity, policy)
    frames = 13
    report = run_plan(plan, graph, frames=frames, warmup=2, check="all")
    assert report.frames == frames and report.checked_frames == frames
    assert report.max_abs_error < 1e-4


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(GRAPHS)), data=st.data())
def test_the_trace_holds_every_firing_once_on_a_member_in_phase_order(plan_for, key, data):
    """With a trace, each frame fires each phase of each actor exactly once, on a member of
    that actor, and a frame's phases of one actor run in order; whole-model copies (one actor,
    no channels) included."""
    from hetflow.plan.mapping import group_members

    graph = GRAPHS[key]
    pool = data.draw(st.sampled_from([["pe0"], ["pe0|pe3"], ["pe1|pe4|pe5"], ["pe0", "pe1"],
                                      ["pe1|pe4|pe5", "pe0|pe3", "pe2"]]))
    plan = plan_for(graph, {l.name: data.draw(st.sampled_from(pool)) for l in graph.layers})
    frames = 11
    pp = prepare(plan, graph)
    try:
        report, _, state = run_prepared(pp, random_source(graph), frames, trace=True)
    finally:
        pp.close()
    assert report.frames == frames
    fired: dict[tuple[str, int], list[int]] = {}
    ends: dict[tuple[str, int, int], tuple[float, float]] = {}
    for element, actor, phase, f, t0, t1 in state.events:
        assert element in group_members(actor) and t0 <= t1
        fired.setdefault((actor, phase), []).append(f)
        ends[(actor, phase, f)] = (t0, t1)
    want = {(a, ph.index) for a, phases in plan.app.phases.items() for ph in phases}
    assert set(fired) == want
    assert all(sorted(fs) == list(range(frames)) for fs in fired.values())
    for (actor, phase, f), (t0, _) in ends.items():
        if phase > 0:
            assert ends[(actor, phase - 1, f)][1] <= t0


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(GRAPHS)), a=st.lists(st.integers(0, 2), min_size=1, max_size=7),
       b=st.lists(st.integers(0, 1), min_size=1, max_size=5))
def test_weighted_dispatch_patterns_keep_order(plan_for, key, a, b):
    """Heterogeneous replica groups take frames by arbitrary cyclic patterns."""
    graph = GRAPHS[key]
    names = [l.name for l in graph.layers]
    assignment = {l: ("pe1|pe4|pe5" if i < len(names) // 2 else "pe0|pe3") for i, l in enumerate(names)}
    plan = plan_for(graph, assignment, dispatch={"pe1|pe4|pe5": a, "pe0|pe3": b})
    plan.mapping.dispatch_mode = "static"
    report = run_plan(plan, graph, frames=17, warmup=1, check="all")
    assert report.checked_frames == 17 and report.max_abs_error < 1e-4


def test_outputs_arrive_in_input_order(plan_for):
    graph = GRAPHS[(16, 1)]
    names = [l.name for l in graph.layers]
    assignment = {l: ("pe1|pe4|pe5" if i < len(names) // 2 else "pe0|pe3") for i, l in enumerate(names)}
    plan = plan_for(graph, assignment)
    source = random_source(graph, pool=5)
    pp = prepare(plan, graph)
    report, kept, _ = run_prepared(pp, source, 20, keep_outputs=lambda f: True)
    sess = reference_session(graph)
    for f in range(20):  # frame f's outputs are those of input f (pool of 5 distinct inputs)
        ref = sess.run(graph.outputs, source(f))
        for t, want in zip(graph.outputs, ref):
            np.testing.assert_allclose(kept[f][t], want, rtol=1e-4, atol=1e-5)
    assert list(kept) == list(range(20))


class Boom:
    def __init__(self, inner, after):
        self.inner, self.n, self.after = inner, 0, after

    def run(self, feeds):
        self.n += 1
        if self.n > self.after:
            raise ValueError("injected failure")
        return self.inner.run(feeds)


def test_worker_fault_stops_run_and_names_element_stage_layer(plan_for):
    graph = GRAPHS[(16, 2)]
    names = [l.name for l in graph.layers]
    plan = plan_for(graph, {l: ("pe0" if i < 8 else "pe1") for i, l in enumerate(names)}, policy="maximal")
    pp = prepare(plan, graph)
    key = ("pe1", 0)
    pp.runners[key] = Boom(pp.runners[key], after=3)
    t0 = time.perf_counter()
    with pytest.raises(RuntimeFault, match=r"element pe1, stage pe1 phase 0 \(layers .+\.\..+\): "
                                           r"ValueError: injected failure"):
        run_prepared(pp, random_source(graph), 10**6)  # hours of frames, were it not stopped
    assert time.perf_counter() - t0 < 2.0  # the issue: a fault stops the run within 2 s


class Hang:
    def __init__(self, inner):
        self.inner = inner

    def run(self, feeds):
        time.sleep(3600)


def test_stall_watchdog_names_the_channel(plan_for):
    graph = GRAPHS[(16, 3)]
    names = [l.name for l in graph.layers]
    plan = plan_for(graph, {l: ("pe0" if i < 8 else "pe1") for i, l in enumerate(names)}, policy="maximal")
    pp = prepare(plan, graph)
    pp.runners[("pe0", 0)] = Hang(pp.runners[("pe0", 0)])
    with pytest.raises(RuntimeFault, match=r"stall: .*pe1 waits on channel .*from pe0"):
        run_prepared(pp, random_source(graph), 50, stall_timeout=0.5)


def test_interrupt_returns_partial_report(plan_for):
    graph = GRAPHS[(8, 0)]
    plan = plan_for(graph, {l.name: "pe0" for l in graph.layers})
    pp = prepare(plan, graph)

    def stop_at(f):
        if f == 30:
            raise KeyboardInterrupt

    report, _, _ = run_prepared(pp, random_source(graph), 10_000, on_frame=stop_at)
    assert not report.complete and report.frames == 31 and report.throughput > 0


def test_ctrl_c_while_the_workers_start_stops_those_started(plan_for, monkeypatch):
    import threading

    import hetflow.runtime.engine as engine

    graph = GRAPHS[(8, 0)]
    plan = plan_for(graph, {l.name: ("pe0" if i < 4 else "pe1") for i, l in
                            enumerate(graph.layers)})
    pp = prepare(plan, graph)
    started: list[threading.Thread] = []

    class SecondStartInterrupted(threading.Thread):
        def start(self):
            if started:  # as if Ctrl-C came between the first worker's start and the second's
                raise KeyboardInterrupt
            started.append(self)
            super().start()

    monkeypatch.setattr(engine.threading, "Thread", SecondStartInterrupted)
    with pytest.raises(KeyboardInterrupt):
        run_prepared(pp, random_source(graph), 10_000)
    started[0].join(timeout=5)
    assert not started[0].is_alive()


def test_mismatch_names_stage(plan_for, monkeypatch):
    graph = GRAPHS[(8, 1)]
    plan = plan_for(graph, {l.name: "pe0" for l in graph.layers})
    import hetflow.runtime.engine as engine

    real = engine.prepare

    class Wrong:
        def __init__(self, inner):
            self.inner = inner

        def run(self, feeds):
            return {k: v + 1.0 for k, v in self.inner.run(feeds).items()}

    def bad_prepare(*a, **k):
        pp = real(*a, **k)
        pp.runners = {key: Wrong(r) for key, r in pp.runners.items()}
        return pp

    patch_everywhere(monkeypatch, engine, "prepare", bad_prepare)
    with pytest.raises(RuntimeFault, match=r"frame 0: output .* differs from the reference .* stage pe0"):
        run_plan(plan, graph, frames=4, warmup=0)


def test_a_plan_for_cores_this_machine_lacks_is_refused_naming_the_element(plan_for):
    from dataclasses import replace

    from hetflow.errors import InputError

    graph = GRAPHS[(16, 2)]
    names = [l.name for l in graph.layers]
    plan = plan_for(graph, {l: ("pe0" if i < 8 else "pe1") for i, l in enumerate(names)})
    plan.elements["pe1"] = replace(plan.elements["pe1"], cores=(4095,))
    with pytest.raises(InputError, match=r"plan for \S+ on test: element pe1 uses core 4095, "
                                         r"which is not available on this machine"):
        run_plan(plan, graph, frames=10)


def test_a_replica_group_on_single_cores_builds_one_session_and_runs_right(plan_for,
                                                                         monkeypatch):
    """`hetflow run` of a group of four single cores: one ONNX Runtime session serves them all
    (built once), and the outputs still equal the reference frame by frame."""
    from hetflow.backends.ort_cpu import OrtCpuBackend

    graph = random_cnn_graph(6, seed=4, channels=8, size=16)
    built = []
    real = OrtCpuBackend.prepare

    def counting(self, subnet, element, **opts):
        built.append(element.name)
        return real(self, subnet, element, **opts)

    monkeypatch.setattr(OrtCpuBackend, "prepare", counting)
    group = "r0|r1|r2|r3"
    plan = plan_for(graph, {l.name: group for l in graph.layers})
    r = run_plan(plan, graph, frames=40, warmup=4, check="all")
    assert len(built) == 1 and r.checked_frames == 40 and r.frames == 40
