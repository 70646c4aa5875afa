"""Frames on a clock (`run_prepared(arrivals=...)`, `hetflow run --rate`): no element takes a
frame before it arrives, outputs still equal the reference frame by frame and in order, a plan
faster than the clock delivers at the clock's rate, and a laned device delivers a frame when its
run ends, not when the next frame arrives."""
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fake_gpu
from hetflow.plan.mapping import group_members
from hetflow.runtime.check import check_outputs
from hetflow.runtime.engine import prepare, run_prepared
from hetflow.runtime.inputs import random_source
from test_engine_lanes import GRAPHS, laned_plan


def paced_run(plan, graph, frames: int, every: float, warmup: int = 2):
    """Run `plan` with frame f arriving `f * every` s after the start (`observed_run`)."""
    return observed_run(plan, graph, frames, np.arange(frames) * every, warmup)


def observed_run(plan, graph, frames: int, arrivals=None, warmup: int = 0):
    """Run `plan` (frames at `arrivals`, or all there from the start); returns the report, the
    largest output error against the reference, when the source was first asked for each frame
    and when the run's clock started."""
    source = random_source(graph)
    asked: dict[int, float] = {}

    def inputs(f):
        asked.setdefault(f, time.perf_counter())
        return source(f)

    pp = prepare(plan, graph)
    try:
        report, kept, state = run_prepared(pp, inputs, frames, warmup, lambda f: True,
                                           arrivals=arrivals)
    finally:
        pp.close()
    assert sorted(kept) == list(range(frames))
    return report, check_outputs(graph, plan.app, kept, source), asked, state.started


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(sorted(GRAPHS)), data=st.data(), lanes=st.integers(1, 3),
       mode=st.sampled_from(["dynamic", "static"]), every=st.sampled_from([0.001, 0.003]))
def test_no_frame_is_taken_before_it_arrives_and_outputs_equal_the_reference(
        seed, data, lanes, mode, every):
    graph = GRAPHS[seed]
    pool = data.draw(st.sampled_from([["gpu0"], ["cpu0", "gpu0"], ["gpu0|cpu0"],
                                      ["cpu0|cpu1", "gpu0", "cpu2"]]))
    assignment = {l.name: data.draw(st.sampled_from(pool)) for l in graph.layers}
    used = {e for a in assignment.values() for e in group_members(a)}
    plan = laned_plan(graph, assignment, {"gpu0": lanes} if "gpu0" in used else {},
                      dispatch_mode=mode)
    fake_gpu.reset()
    frames = 12
    report, error, asked, started = paced_run(plan, graph, frames, every)
    assert report.frames == frames and error < 1e-4
    assert sorted(asked) == list(range(frames))
    late = {f: t - (started + f * every) for f, t in asked.items()}
    assert min(late.values()) >= 0, late


def test_a_plan_faster_than_the_clock_delivers_at_the_clocks_rate():
    graph = GRAPHS[0]
    plan = laned_plan(graph, {l.name: "cpu0" for l in graph.layers}, {})
    rate = 250.0
    report, error, _, _ = paced_run(plan, graph, 60, 1 / rate, warmup=5)
    assert error < 1e-4
    # no frame completes before it arrives: at most one more frame than the window's arrivals
    window = report.notes["window_s"]
    assert 0 < report.throughput <= rate + 1 / window, report
    assert report.throughput >= 0.8 * rate, report


@pytest.mark.parametrize("stages", [["gpu0"], ["gpu0", "cpu0"]], ids=["copy", "pipeline"])
def test_a_laned_device_delivers_a_frame_when_its_run_ends(stages):
    """Frames 40 ms apart, runs of 3 ms on two lanes: a driver that waited for the next frame
    before collecting a finished run would deliver each frame about 40 ms after it arrived.
    Whole-model copies (the direct lane loop) and a pipeline whose device stage reads the
    frames (the generator driver; that stage fires once per phase)."""
    graph = GRAPHS[2]
    names = [l.name for l in graph.layers]
    assignment = {l: stages[min(len(stages) - 1, len(stages) * i // len(names))]
                  for i, l in enumerate(names)}
    plan = laned_plan(graph, assignment, {"gpu0": 2})
    slow = 0.003
    fake_gpu.reset(slow=slow)
    try:
        report, error, _, _ = paced_run(plan, graph, 12, 0.04)
    finally:
        fake_gpu.reset()
    assert error < 1e-4
    runs = slow * len(plan.app.phases["gpu0"])  # a frame's runs on the device, one after another
    assert report.latency["p50"] < runs + 0.015, (runs, report.latency)
