"""Batched elements in the one firing loop: an element of batch b fires each phase once on up
to b frames. Over random graphs and mappings with a batched member (lanes, replica groups,
static and dynamic dispatch, frames on a clock or all there), outputs equal the reference frame
by frame and in order, no firing takes more than b frames, and no frame is taken before it
arrives; at a rate too low to fill a batch within its maximum wait a partial batch fires and
every frame's latency stays within the wait plus a run. A batched stand-in device
(tests/runtime/batched_fake.py) gives the real model's outputs."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import batched_fake
import fake_gpu
from hetflow.errors import InputError
from hetflow.plan.mapping import group_members
from hetflow.plan.program import batch_cycle, compile_programs
from hetflow.runtime.inputs import random_source
from test_engine_arrivals import observed_run
from test_engine_lanes import GRAPHS, failing_at, laned_plan


@pytest.fixture
def firings(monkeypatch):
    return batched_fake.install(monkeypatch)


def first_phase(firings) -> list[int]:
    """The frames of each firing of the first phase, in order."""
    return [n for name, n, _ in firings if name.endswith("#0")]


def actor_of(plan, element: str) -> str:
    return next(a for a in plan.app.phases if element in group_members(a))


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.sampled_from(sorted(GRAPHS)), data=st.data(), lanes=st.integers(1, 3),
       batch=st.integers(2, 5), wait=st.sampled_from([0.0, 0.002]),
       mode=st.sampled_from(["dynamic", "static"]), every=st.sampled_from([None, 0.001]))
def test_batched_pipelines_equal_the_reference_in_order(firings, seed, data, lanes, batch, wait,
                                                        mode, every):
    graph = GRAPHS[seed]
    pool = data.draw(st.sampled_from([["gpu0"], ["gpu0", "cpu0"], ["cpu0", "gpu0", "cpu1"],
                                      ["gpu0|cpu0", "cpu1"], ["cpu0|cpu1", "gpu0", "cpu2"]]))
    assignment = {l.name: data.draw(st.sampled_from(pool)) for l in graph.layers}
    used = {e for a in assignment.values() for e in group_members(a)}
    batched = {"gpu0"} if "gpu0" in used else {sorted(used)[0]}
    if data.draw(st.booleans()):  # a CPU element batched too, where the mapping has one
        batched |= {e for e in used if e.startswith("cpu")}
    plan = laned_plan(graph, assignment, {"gpu0": lanes} if "gpu0" in used else {},
                      dispatch_mode=mode)
    # (a stage whose later phase takes what its earlier phases sent is refused: tested below)
    batched = {e for e in batched if batch_cycle(plan, actor_of(plan, e)) is None}
    plan.mapping.batch = {e: batch for e in batched}
    plan.mapping.batch_wait = {e: wait for e in batched}
    fake_gpu.reset()
    firings.clear()
    frames = 13
    arrivals = None if every is None else np.arange(frames) * every
    report, error, asked, started = observed_run(plan, graph, frames, arrivals)
    assert report.frames == frames and error < 1e-4
    assert all(1 <= n <= batch for _, n, _ in firings)
    assert bool(firings) == bool(batched)
    assert sorted(asked) == list(range(frames))
    if arrivals is not None:
        assert min(t - (started + arrivals[f]) for f, t in asked.items()) >= 0


def test_a_saturated_stream_fills_every_batch_but_the_last(firings):
    graph = GRAPHS[0]
    plan = laned_plan(graph, {l.name: "gpu0" for l in graph.layers}, {})
    plan.mapping.batch = {"gpu0": 4}
    report, error, _, _ = observed_run(plan, graph, 14)
    assert report.frames == 14 and error < 1e-4
    assert first_phase(firings) == [4, 4, 4, 2]  # the stream's end: a partial batch


def test_too_low_a_rate_fires_partial_batches_within_the_wait(monkeypatch):
    """8 frames would take 0.35 s to come at 20 frames/s: a batch fires after 30 ms with
    the frames it has, and a frame's latency stays within the wait plus a run."""
    graph = GRAPHS[1]
    run, wait, every, frames = 0.01, 0.03, 0.05, 10
    firings = batched_fake.install(monkeypatch, t1=run / 8, a=0.0)  # a full batch's time: run
    # (phase by phase: the whole model runs `run` a batch only with one phase; fine as a bound)
    plan = laned_plan(graph, {l.name: "gpu0" for l in graph.layers}, {})
    plan.mapping.batch, plan.mapping.batch_wait = {"gpu0": 8}, {"gpu0": wait}
    report, error, _, _ = observed_run(plan, graph, frames, np.arange(frames) * every)
    assert report.frames == frames and error < 1e-4
    assert sum(first_phase(firings)) == frames
    assert max(first_phase(firings)) < 8
    assert report.latency["max"] < wait + run + 0.04  # (scheduling slack on a shared CPU)
    assert report.latency["max"] >= wait  # the first frame of a batch waited for more


def test_no_wait_fires_whatever_is_waiting_as_soon_as_a_lane_is_free(firings):
    graph = GRAPHS[2]
    plan = laned_plan(graph, {l.name: "gpu0" for l in graph.layers}, {})
    plan.mapping.batch = {"gpu0": 8}  # batch_wait absent: 0
    frames = 6
    report, error, _, _ = observed_run(plan, graph, frames, np.arange(frames) * 0.03)
    assert report.frames == frames and error < 1e-4
    assert first_phase(firings) == [1] * frames  # one frame there at a time
    assert report.latency["max"] < 0.03


def test_a_batched_stage_between_cpu_stages(firings):
    graph = GRAPHS[3]
    names = [l.name for l in graph.layers]
    third = len(names) // 3
    assignment = {n: "cpu0" if i < third else "gpu0" if i < 2 * third else "cpu1"
                  for i, n in enumerate(names)}
    plan = laned_plan(graph, assignment, {"gpu0": 2})
    plan.mapping.batch, plan.mapping.batch_wait = {"gpu0": 3}, {"gpu0": 0.5}
    report, error, _, _ = observed_run(plan, graph, 20)
    assert report.frames == 20 and error < 1e-4
    # 2 lanes of 3 frames: 20 frames fill six batches; the stream's end leaves 2 frames
    sizes = sorted(first_phase(firings))
    assert sizes[-6:] == [3] * 6 and sizes[:-6] in ([2], [1, 1])


def test_a_batched_interleaved_stage_is_refused_naming_the_element():
    graph = GRAPHS[0]
    names = [l.name for l in graph.layers]
    plan = laned_plan(graph, {n: "gpu0" if i % 2 else "cpu0" for i, n in enumerate(names)}, {})
    phases = len(plan.app.phases["gpu0"])
    if phases < 2:
        pytest.skip("the draw gave gpu0 one phase")
    plan.mapping.interleave = {"gpu0": [1] * (phases - 1) + [0]}
    plan.mapping.batch = {"gpu0": 4}
    with pytest.raises(InputError, match="element gpu0: a batched element"):
        compile_programs(plan)


def test_a_batched_stage_that_would_wait_on_itself_is_refused_naming_the_element():
    """Alternate layers between cpu0 and gpu0: gpu0's later phases take what cpu0 made of its
    earlier phases' outputs, frame by frame."""
    graph = GRAPHS[0]
    names = [l.name for l in graph.layers]
    plan = laned_plan(graph, {n: "gpu0" if i % 2 else "cpu0" for i, n in enumerate(names)}, {})
    loop = batch_cycle(plan, "gpu0")
    assert loop is not None and loop.endswith("cpu0->gpu0")
    plan.mapping.batch = {"gpu0": 4}
    with pytest.raises(InputError, match=f"element gpu0: .* its channel {loop} closes a cycle"):
        compile_programs(plan)


def test_batched_copies_beside_a_cpu_copy_count_every_frame_of_a_batch(monkeypatch):
    """The practitioner's parallel design: the GPU copy at (b, k) beside a CPU copy; each run
    of the GPU copy takes b frames, and every frame counts."""
    from hetflow.runtime import baselines

    firings = batched_fake.install(monkeypatch)
    monkeypatch.setattr(baselines, "runners_for", batched_fake.batched_runners_for)
    graph = GRAPHS[0]
    plan = laned_plan(graph, {l.name: "gpu0|cpu0" for l in graph.layers}, {})
    gpu, cpu = plan.elements["gpu0"], plan.elements["cpu0"]
    report = baselines.measure_parallel(graph, [gpu, cpu], random_source(graph), frames=30,
                                        warmup=1, lanes={"gpu0": 2}, batch={"gpu0": 4})
    assert report.frames == 30 and report.notes["batch"] == {"gpu0": 4}
    # a run of b frames is the element busy once, not b times (a share, at most 1)
    assert 0 < report.utilisation["gpu0"] <= 1.0
    sizes = [n for _, n, _ in firings][2:]  # after each lane's one warm-up frame
    # full batches but for each lane's last (the lanes take frames from one stream, so the
    # two lanes' last batches may end in either order)
    assert sizes and all(1 <= n <= 4 for n in sizes) and all(n == 4 for n in sizes[:-2])
    single = baselines.measure_single(graph, gpu, random_source(graph), frames=12, warmup=1,
                                      batch=4)
    assert single.frames == 12 and single.name == "single:gpu0 b4"


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 39), min_size=1, max_size=12, unique=True),
       st.integers(1, 2), st.integers(0, 3))
def test_a_batch_delivered_at_once_leaves_what_its_frames_one_by_one_leave(fs, outputs, by):
    """`Delivery.deliver_frames` keeps the same outputs, counts the same element and completes
    the same frames as `deliver` called for each frame (each output actor once)."""
    from hetflow.plan.schedule import InOrder
    from hetflow.runtime.engine import Delivery

    outs = [{f"t{f}": np.full(2, f)} for f in fs]
    one, block = (Delivery(InOrder(40), 40, outputs, lambda f: f % 3 == 0) for _ in range(2))
    for _ in range(outputs):
        for f, o in zip(fs, outs):
            one.deliver(f, o, by)
        block.deliver_frames(fs, outs, by)
    assert one.outputs.keys() == block.outputs.keys() == {f for f in fs if f % 3 == 0}
    assert np.array_equal(one.by, block.by)
    assert np.array_equal(np.isnan(one.order.finished), np.isnan(block.order.finished))
    assert not np.isnan(block.order.finished[fs]).any() and one.parts == block.parts == {}


def test_a_frame_the_source_fails_on_stops_a_batched_lane_naming_the_frame(firings):
    """A whole model batched on one element loads each batch's frames at once: the frame the
    source fails on is still the one named."""
    from hetflow.errors import RuntimeFault
    from hetflow.runtime.engine import prepare, run_prepared

    graph = GRAPHS[0]
    plan = laned_plan(graph, {l.name: "gpu0" for l in graph.layers}, {"gpu0": 2})
    plan.mapping.batch = {"gpu0": 4}
    pp = prepare(plan, graph)
    try:
        with pytest.raises(RuntimeFault, match="frame source, frame 6: ValueError: no frame 6"):
            run_prepared(pp, failing_at(random_source(graph), 6), frames=16)
    finally:
        pp.close()
