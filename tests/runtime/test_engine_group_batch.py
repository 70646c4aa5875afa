"""A batched device beside CPU copies in one replica group (the practitioner's design, run by
hetflow): each lane of the batched member takes a block of consecutive frames, the copies a
frame each; outputs equal the reference frame by frame and leave in order; the stream's end
leaves one partial block; and the group runs at the rate its model predicts. The stand-ins
(tests/fake_gpu.py) sleep fixed times: a device firing of b frames t1 * (a + (1 - a) b), a
copy `seconds` a frame, so a few hundred frames measure a rate the machine's noise barely
moves."""
import dataclasses
import os

import numpy as np
import pytest

import fake_gpu
from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.mapping.from_profile import with_batches
from hetflow.mapping.problem import Problem, evaluate
from hetflow.model.synthetic import random_cnn_graph
from hetflow.plan.mapping import Mapping, group_name
from hetflow.plan.plan import Plan
from hetflow.runtime.api import run_plan
from hetflow.runtime.check import check_outputs
from hetflow.runtime.engine import prepare, run_prepared
from hetflow.runtime.inputs import random_source

CORES = sorted(os.sched_getaffinity(0))


def group_plan(graph, members, lanes: int, batch: int, predicted: float = 0.0) -> Plan:
    """The whole model on one group of `members` (the last the batched device)."""
    actor = group_name([e.name for e in members])
    assignment = {l.name: actor for l in graph.layers}
    mapping = Mapping(assignment, "paper", lanes={members[-1].name: lanes},
                      batch={members[-1].name: batch})
    return Plan(graph.name, graph.model_hash, "", "test", mapping,
                cnn_to_csdf(graph, assignment, "paper"), {e.name: e for e in members}, 2,
                {"throughput": predicted}, "test")


def stand_ins(copy_seconds: float, copies: int = 2):
    cpus = [fake_gpu.cpu(f"cpu{i}", CORES[(i + 1) % len(CORES)], copy_seconds)
            for i in range(copies)]
    return [*cpus, fake_gpu.gpu("gpu0", CORES[0])]


@pytest.fixture(autouse=True)
def quiet_fakes():
    yield
    fake_gpu.reset()


def firings_of(events, element: str) -> list[list[int]]:
    """The frames of each firing of `element`'s lanes, in the order the firings started."""
    runs: dict[tuple[str, float], list[int]] = {}
    for who, _, _, f, t0, _ in events:
        if who.split("/")[0] == element:
            runs.setdefault((who, t0), []).append(f)
    return [sorted(fs) for _, fs in sorted(runs.items(), key=lambda x: x[0][1])]


@pytest.mark.parametrize("lanes, batch, frames", [(1, 4, 30), (2, 4, 30), (2, 3, 23)])
def test_each_lane_fires_blocks_of_consecutive_frames_and_outputs_leave_in_order(
        lanes, batch, frames):
    graph = random_cnn_graph(10, 1)
    fake_gpu.reset(slow=0.001, a=0.5)
    plan = group_plan(graph, stand_ins(0.004), lanes, batch)
    source = random_source(graph)
    left: list[int] = []
    pp = prepare(plan, graph)
    try:
        report, kept, state = run_prepared(pp, source, frames, 0, lambda f: True, trace=True,
                                           on_frame=left.append)
    finally:
        pp.close()
    assert report.frames == frames and left == list(range(frames))
    assert check_outputs(graph, plan.app, kept, source) < 1e-4
    gpu = firings_of(state.events, "gpu0")
    cpu = [f for e in ("cpu0", "cpu1") for run in firings_of(state.events, e) for f in run]
    assert gpu and cpu  # both kinds took frames
    assert sorted([f for run in gpu for f in run] + cpu) == list(range(frames))
    for run in gpu:  # a block of consecutive frames, full unless it is the stream's last
        assert run == list(range(run[0], run[0] + len(run)))
        assert len(run) == batch or run[-1] == frames - 1


def test_a_static_pattern_gives_each_block_the_members_next_frames_and_a_partial_last():
    """Pattern [gpu, gpu, gpu, cpu] over 22 frames: the device's 17 frames fire as blocks of
    its next 4 frames in the pattern, the last one frame (the stream's end); every frame's
    outputs equal the reference and leave in order."""
    graph = random_cnn_graph(10, 2)
    fake_gpu.reset(slow=0.001, a=0.5)
    plan = group_plan(graph, stand_ins(0.002, copies=1), 1, 4)
    plan.mapping.dispatch_mode = "static"
    plan.mapping.dispatch = {plan.mapping.actors[0]: [1, 1, 1, 0]}
    source = random_source(graph)
    left: list[int] = []
    pp = prepare(plan, graph)
    try:
        report, kept, state = run_prepared(pp, source, 22, 0, lambda f: True, trace=True,
                                           on_frame=left.append)
    finally:
        pp.close()
    assert left == list(range(22)) and check_outputs(graph, plan.app, kept, source) < 1e-4
    mine = [f for f in range(22) if f % 4 != 3]
    assert firings_of(state.events, "gpu0") == [mine[i:i + 4] for i in range(0, 17, 4)]
    assert [f for run in firings_of(state.events, "cpu0") for f in run] == [3, 7, 11, 15, 19]


def test_a_batched_device_beside_cpu_copies_runs_at_its_predicted_rate():
    """Two lanes of batch 8 (a firing of 8 frames 2.75x one frame's) beside two copies: the
    rate measured over 600 frames is within 15% of the model's (the sum of the members'
    rates, the device's k * b / t(b, k))."""
    graph = random_cnn_graph(3, 0, channels=1, size=1)  # microseconds a run on a core
    t1, a, k, b, copy_s = 0.008, 0.75, 2, 8, 0.012
    fake_gpu.reset(slow=t1, a=a)
    members = stand_ins(copy_s)
    whole = np.zeros((len(graph.layers), len(members)))
    whole[0] = [copy_s, copy_s, t1]  # the whole model's time on each member
    # (the model's elements on cores of their own: the stand-ins share this machine's two)
    own = [dataclasses.replace(e, cores=(100 + i,)) for i, e in enumerate(members)]
    problem = Problem(graph, own, whole, lambda n, s, d: 0.0, call_overhead=50e-6,
                      lane_slowdown={"gpu0": {1: 1.0, 2: 1.0}})
    table = {f"{bb},{kk}": {"alone": {"median": t1 * (a + (1 - a) * bb)}}
             for bb in (1, 2, 4, 8) for kk in (1, 2)}
    problem = with_batches(problem, {"gpu0": table})
    plan = group_plan(graph, members, k, b)
    predicted = evaluate(problem, plan.mapping).throughput
    assert predicted == pytest.approx(k * b / (t1 * (a + (1 - a) * b) + 50e-6)
                                      + 2 / (copy_s + 50e-6), rel=1e-9)
    plan.predicted["throughput"] = predicted
    report = run_plan(plan, graph, frames=600, warmup=60, check="first")
    assert report.checked_frames > 0 and report.max_abs_error < 1e-4
    assert report.throughput == pytest.approx(predicted, rel=0.15)
    shares = report.notes["per_element_fps"]
    assert shares["gpu0"] > 0.7 * report.throughput  # the device carried most of the frames
