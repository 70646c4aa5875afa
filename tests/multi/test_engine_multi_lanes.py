"""Multi-plans with what single plans run on the one loop: GPU lanes (a stand-in GPU,
tests/fake_gpu), batches and interleaved phase orders, on the thread and process engines;
outputs equal the reference frame by frame."""
import os

import pytest
from hypothesis import given, settings, strategies as st

import fake_gpu
from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.errors import InputError
from hetflow.plan.mapping import Mapping
from hetflow.plan.plan import Plan
from hetflow.multi.multiplan import AppEntry, MultiPlan
from hetflow.multi.run import run_multiplan

from test_procs import on_files
from test_runtime import cpu_elements, graphs, tiny_problem

CORES = sorted(os.sched_getaffinity(0))


def entry(name: str, priority: int, period: float, graph, assignment: dict, elements: dict,
          **mapping) -> AppEntry:
    app = cnn_to_csdf(graph, assignment, "maximal")
    plan = Plan(graph.name, graph.model_hash, "", "test",
                Mapping(assignment, "maximal", **mapping), app,
                {e: elements[e] for e in app.phases}, 2, {"throughput": 0.0}, "test")
    return AppEntry(name, period, priority, plan)


def halves(graph, first: str, second: str) -> dict:
    names = [l.name for l in graph.layers]
    return {l: first if i < len(names) // 2 else second for i, l in enumerate(names)}


def check(report, frames: int) -> None:
    for r in report.apps:
        assert r.frames >= frames and r.checked_frames == 4 and r.max_abs_error < 1e-3


def gpu_elements() -> dict:
    """The stand-in GPU on the first core beside the CPU elements."""
    return {"gpu0": fake_gpu.gpu("gpu0", CORES[0]), **{e.name: e for e in cpu_elements()}}


def run_on_fake_gpu(plan, mp, slow: float, max_in_flight: int) -> tuple:
    """(report, the most runs the stand-in GPU held at once) of 30 frames of `plan` on the
    thread engine, each stand-in firing sleeping `slow` seconds a frame."""
    fake_gpu.reset(slow=slow)
    try:
        report = run_multiplan(plan, graphs(mp), frames=30, warmup=2,
                               max_in_flight=max_in_flight, engine="threads")
        return report, fake_gpu.IN_FLIGHT["max"]
    finally:
        fake_gpu.reset()


def test_two_applications_share_a_laned_gpu():
    mp = tiny_problem()
    ga, gb = (a.graph for a in mp.apps)
    els = gpu_elements()
    cpu = cpu_elements()[0].name
    plan = MultiPlan("test", [
        entry("a", 1, 0.01, ga, {l.name: "gpu0" for l in ga.layers}, els, lanes={"gpu0": 2}),
        entry("b", 2, 0.0, gb, halves(gb, cpu, "gpu0"), els, lanes={"gpu0": 2})])
    report, most = run_on_fake_gpu(plan, mp, 0.004, 3)
    check(report, 30)
    assert most >= 2  # the lanes overlapped runs
    assert report.apps[1].notes["peak_in_flight"] == 3  # free-running b: as many as allowed


@pytest.mark.parametrize("engine", ["threads", "processes"])
def test_a_batched_element_beside_another_application(engine, tmp_path):
    mp = tiny_problem(0.02, 0.0)
    ga, gb = (a.graph for a in mp.apps)
    e0, e1 = (e.name for e in cpu_elements())
    els = {e.name: e for e in cpu_elements()}
    plan = MultiPlan("test", [
        entry("a", 1, 0.02, ga, {l.name: e0 for l in ga.layers}, els),
        entry("b", 2, 0.0, gb, halves(gb, e0, e1), els, batch={e1: 3},
              batch_wait={e1: 0.002})])
    on_files(plan, tmp_path)
    report = run_multiplan(plan, graphs(mp), frames=20, warmup=1, max_in_flight=4,
                           engine=engine)
    check(report, 20)


def back_and_forth(graph, e0: str, e1: str) -> dict:
    names = [l.name for l in graph.layers]
    third = max(1, len(names) // 3)
    return {l: e1 if third <= i < 2 * third else e0 for i, l in enumerate(names)}


@pytest.mark.parametrize("engine", ["threads", "processes"])
def test_an_interleaved_application_beside_another(engine, tmp_path):
    mp = tiny_problem()
    ga, gb = (a.graph for a in mp.apps)
    e0, e1 = (e.name for e in cpu_elements())
    els = {e.name: e for e in cpu_elements()}
    a = entry("a", 1, 0.0, ga, back_and_forth(ga, e0, e1), els)
    assert len(a.plan.app.phases[e0]) == 2
    a.plan.mapping.interleave = {e0: [1, 0]}  # phase 0 of frame f + 1 before phase 1 of f
    plan = MultiPlan("test", [a, entry("b", 2, 0.02, gb, {l.name: e1 for l in gb.layers}, els)])
    on_files(plan, tmp_path)
    with pytest.raises(InputError, match="--max-in-flight 1: application a runs its stages "
                                         "interleaved, 2 frames at once"):
        run_multiplan(plan, graphs(mp), frames=5, max_in_flight=1, engine=engine)
    report = run_multiplan(plan, graphs(mp), frames=20, warmup=1, max_in_flight=3,
                           engine=engine)
    check(report, 20)


@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_random_mappings_of_two_applications_keep_their_outputs(data):
    """Any assignment of both applications' layers to two elements (stages shared by both in
    any order), free-running or periodic: every frame completes and the outputs equal the
    reference."""
    mp = tiny_problem()
    names = [e.name for e in cpu_elements()]
    els = {e.name: e for e in cpu_elements()}
    entries = []
    for i, a in enumerate(mp.apps):
        assignment = {l.name: data.draw(st.sampled_from(names)) for l in a.graph.layers}
        period = data.draw(st.sampled_from([0.0, 0.005, 0.02]))
        entries.append(entry(a.spec.name, i + 1, period, a.graph, assignment, els))
    plan = MultiPlan("test", entries)
    report = run_multiplan(plan, graphs(mp), frames=8, warmup=1,
                           max_in_flight=data.draw(st.integers(1, 3)), engine="threads",
                           stall_timeout=10.0)
    assert report.complete
    check(report, 8)


@pytest.mark.parametrize("gpu_lanes,most", [("shared", (1, 2)), ("own", (3, 4))])
def test_lanes_of_each_applications_own_run_beside_each_other(gpu_lanes, most):
    # two free-running applications on a 2-lane GPU: shared lanes hold at most 2 runs at
    # once among both; each application's own 2 lanes, up to 4
    mp = tiny_problem(0.0, 0.0)
    ga, gb = (a.graph for a in mp.apps)
    els = gpu_elements()
    plan = MultiPlan("test", [
        entry("a", 1, 0.0, ga, {l.name: "gpu0" for l in ga.layers}, els, lanes={"gpu0": 2}),
        entry("b", 2, 0.0, gb, {l.name: "gpu0" for l in gb.layers}, els, lanes={"gpu0": 2})],
        gpu_lanes=gpu_lanes)
    report, seen = run_on_fake_gpu(plan, mp, 0.004, 4)
    check(report, 30)
    assert most[0] <= seen <= most[1]


def test_a_short_firing_is_not_held_by_a_long_one_launched_before_it():
    # on lanes of their own: a's 2 ms firings beside b's batches of 8 (16 ms a firing, always
    # one in flight); a's frame is done when its own run ends, not when b's older one does
    mp = tiny_problem(0.0, 0.0)
    ga, gb = (a.graph for a in mp.apps)
    els = gpu_elements()
    plan = MultiPlan("test", [
        entry("a", 1, 0.01, ga, {l.name: "gpu0" for l in ga.layers}, els, lanes={"gpu0": 1}),
        entry("b", 2, 0.0, gb, {l.name: "gpu0" for l in gb.layers}, els, lanes={"gpu0": 1},
              batch={"gpu0": 8})], gpu_lanes="own")
    report, _ = run_on_fake_gpu(plan, mp, 0.002, 8)
    check(report, 30)
    a = next(r for r in report.apps if r.name == "a")
    assert a.latency["max"] < 0.008  # held by b's runs it would reach 2 + up to 14 ms
