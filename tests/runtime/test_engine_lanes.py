"""GPU lanes in the runtime: a GPU stage with k lanes keeps up to k frames in flight, outputs
still equal the reference frame by frame and in order; the baselines run lanes too; a plan
asking for lanes on a CPU element is refused naming it. A stand-in GPU backend (tests/fake_gpu)
runs the lanes on the CPU so this runs without CUDA."""
import dataclasses
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fake_gpu
from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.errors import InputError
from hetflow.plan.mapping import Mapping, group_members
from hetflow.plan.plan import Plan
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform.spec import ProcessingElement
from hetflow.runtime.api import run_plan
from hetflow.runtime.baselines import measure_parallel, measure_single
from hetflow.runtime.inputs import random_source

CORES = sorted(os.sched_getaffinity(0))
GRAPHS = {s: random_cnn_graph(10, s) for s in range(4)}


def laned_plan(graph, assignment, lanes, capacity=2, dispatch_mode="dynamic"):
    app = cnn_to_csdf(graph, assignment, "paper")
    pool = {"gpu0": fake_gpu.gpu("gpu0", CORES[0])}
    for i in range(3):
        pool[f"cpu{i}"] = ProcessingElement(f"cpu{i}", "cpu", (CORES[(i + 1) % len(CORES)],))
    elements = {e: pool[e] for a in app.phases for e in group_members(a)}
    mapping = Mapping(assignment, "paper", lanes=lanes, dispatch_mode=dispatch_mode)
    return Plan(graph.name, graph.model_hash, "", "test", mapping, app, elements, capacity,
                {"throughput": 0.0}, "test")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(sorted(GRAPHS)), data=st.data(), lanes=st.integers(1, 4),
       capacity=st.integers(1, 3), mode=st.sampled_from(["dynamic", "static"]))
def test_laned_pipelines_equal_the_reference_in_order(seed, data, lanes, capacity, mode):
    graph = GRAPHS[seed]
    pool = data.draw(st.sampled_from([["gpu0"], ["gpu0", "cpu0"], ["cpu0", "gpu0", "cpu1"],
                                      ["gpu0|cpu0", "cpu1"], ["cpu0|cpu1", "gpu0", "cpu2"]]))
    assignment = {l.name: data.draw(st.sampled_from(pool)) for l in graph.layers}
    used = {e for a in assignment.values() for e in group_members(a)}
    plan = laned_plan(graph, assignment, {"gpu0": lanes} if "gpu0" in used else {}, capacity,
                      mode)
    fake_gpu.reset()
    report = run_plan(plan, graph, frames=17, warmup=2, check="all")
    assert report.frames == 17 and report.checked_frames == 17
    assert report.max_abs_error < 1e-4


def test_k_lanes_keep_k_frames_in_flight():
    graph = GRAPHS[0]
    plan = laned_plan(graph, {l.name: "gpu0" for l in graph.layers}, {"gpu0": 4})
    fake_gpu.reset(slow=0.01)
    try:
        report = run_plan(plan, graph, frames=40, warmup=4, check="all")
        most = fake_gpu.IN_FLIGHT["max"]
    finally:
        fake_gpu.reset()
    assert report.checked_frames == 40 and report.max_abs_error < 1e-4
    assert most == 4


def test_the_report_says_which_elements_delivered_the_frames():
    """A whole-model group of a laned device and an unlaned one (the parallel copies' design,
    with lanes on one member): each element's share of the frames counted, as frames/s adding up to the
    plan's rate (the parallel baseline's split). Both members are stand-ins that take
    milliseconds a frame: a CPU core runs this small graph's 120 frames inside one release
    poll, too short a run for any steady rate."""
    graph = GRAPHS[1]
    plan = laned_plan(graph, {l.name: "gpu0|cpu0" for l in graph.layers}, {"gpu0": 3})
    plan = dataclasses.replace(plan, elements={**plan.elements,
                                               "cpu0": fake_gpu.gpu("cpu0", CORES[-1])})
    fake_gpu.reset(slow=0.002)
    try:
        report = run_plan(plan, graph, frames=120, warmup=6, check="all")
    finally:
        fake_gpu.reset()
    assert report.throughput > 0, report
    split = report.notes["per_element_fps"]
    assert report.checked_frames == 120 and report.max_abs_error < 1e-4
    assert set(split) <= {"gpu0", "cpu0"} and split.get("gpu0", 0.0) > 0
    assert sum(split.values()) == pytest.approx(report.throughput)


def test_the_driver_asks_only_the_oldest_runs_whether_they_are_done():
    """Runs are looked at in launch order, up to the first not done: about one question per
    firing and one per wait, not one per lane at every step (k per firing)."""
    graph = GRAPHS[0]
    k, frames, warmup = 8, 60, 4
    plan = laned_plan(graph, {l.name: "gpu0" for l in graph.layers}, {"gpu0": k})
    fake_gpu.reset(slow=0.005)
    try:
        report = run_plan(plan, graph, frames=frames, warmup=warmup, check="all")
        asked = fake_gpu.ASKED["finished"]
    finally:
        fake_gpu.reset()
    assert report.checked_frames == frames and report.max_abs_error < 1e-4
    firings = (frames + warmup) * sum(len(ps) for ps in plan.app.phases.values())
    assert asked <= 3 * firings + k, (asked, firings)


def test_a_plan_with_lanes_on_a_cpu_element_is_refused_naming_it():
    graph = GRAPHS[1]
    plan = laned_plan(graph, {l.name: "cpu0" for l in graph.layers}, {"cpu0": 2})
    with pytest.raises(InputError, match="'cpu0' is a cpu element: only GPU elements run lanes"):
        run_plan(plan, graph, frames=4)
    plan = laned_plan(graph, {l.name: "gpu0" for l in graph.layers}, {"gpu0": 0})
    with pytest.raises(InputError, match="'gpu0': lanes must be a whole number >= 1"):
        run_plan(plan, graph, frames=4)


def test_baselines_run_the_gpu_at_its_lanes():
    graph = GRAPHS[2]
    g = fake_gpu.gpu("gpu0", CORES[0])
    fake_gpu.reset(slow=0.005)
    try:
        one = measure_single(graph, g, random_source(graph), frames=30, warmup=1)
        assert fake_gpu.IN_FLIGHT["max"] == 1
        four = measure_single(graph, g, random_source(graph), frames=30, warmup=1, lanes=4)
        assert fake_gpu.IN_FLIGHT["max"] == 4
        cpu = ProcessingElement("cpu1", "cpu", (CORES[-1],))
        par = measure_parallel(graph, [g, cpu], random_source(graph), frames=30, warmup=1,
                               lanes={"gpu0": 3})
    finally:
        fake_gpu.reset()
    assert one.name == "single:gpu0" and four.name == "single:gpu0 x4 lanes"
    assert four.notes["lanes"] == {"gpu0": 4}
    assert set(par.notes["per_element_fps"]) == {"gpu0", "cpu1"} and par.frames >= 30


def failing_at(source, frame: int):
    """`source`, failing with ValueError("no frame N") on frame N."""
    def failing(f):
        if f == frame:
            raise ValueError(f"no frame {frame}")
        return source(f)
    return failing


def test_a_stopped_run_leaves_its_lanes_free_for_the_next():
    """A fault while four lanes have runs in flight stops the run; the same prepared plan then
    runs again (each lane takes one run at a time: one left in flight would refuse the next)."""
    from hetflow.errors import RuntimeFault
    from hetflow.runtime.engine import prepare, run_prepared

    graph = GRAPHS[3]
    plan = laned_plan(graph, {l.name: "gpu0" for l in graph.layers}, {"gpu0": 4})
    fake_gpu.reset(slow=0.02)
    good = random_source(graph)
    pp = prepare(plan, graph)
    try:
        with pytest.raises(RuntimeFault, match="frame source, frame 9: ValueError: no frame 9"):
            run_prepared(pp, failing_at(good, 9), frames=20)
        report, _, _ = run_prepared(pp, good, frames=12)
        assert report.frames == 12
    finally:
        pp.close()
        fake_gpu.reset()


def test_a_lane_that_fails_stops_the_run_naming_the_element_and_lane():
    """A whole-model copy on a laned GPU: a failing run stops the run with an error naming the
    element, the lane and the stage; the other lanes' runs in flight are collected."""
    from hetflow.errors import RuntimeFault
    from hetflow.runtime.engine import prepare, run_prepared

    graph = GRAPHS[2]
    plan = laned_plan(graph, {l.name: "gpu0" for l in graph.layers}, {"gpu0": 3})
    fake_gpu.reset(slow=0.002)
    pp = prepare(plan, graph)
    broken = pp.runner("gpu0", 0, 2)
    real = broken.collect

    def collect():
        real()
        raise ValueError("device lost")

    broken.collect = collect
    try:
        with pytest.raises(RuntimeFault, match=r"gpu0.*lane 2.*ValueError: device lost"):
            run_prepared(pp, random_source(graph), frames=30)
        assert all(r._pending is None for r in [pp.runner("gpu0", 0, i) for i in range(3)])
    finally:
        broken.collect = real
        pp.close()
        fake_gpu.reset()
