"""A GPU batched beside CPU copies in one replica group: the group's rate model against a small
simulation of the runtime's dispatch, written apart from the model. Each lane of the batched
member takes a block of b consecutive frames when it is free (`plan.schedule.Dispatch`), a CPU
copy one frame; a lane fires once its block is there, for t(b, k) whatever its frame count;
frames leave in order. The model: the group runs the sum of its members' rates, the batched
one k * b / t(b, k); fed flat out a frame takes at most the slowest member's firing (a frame
behind it leaves only after it); paced, a frame of the batched member waits for its block too.
"""
import dataclasses
import heapq

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hetflow.mapping.from_profile import with_batches
from hetflow.mapping.lanes import batchable, fit_lanes
from hetflow.mapping.problem import Problem, evaluate, saturated_latency
from hetflow.model.synthetic import random_cnn_graph
from hetflow.plan.mapping import Mapping, group_name
from hetflow.platform.spec import ProcessingElement
from test_batch_cost_model import batch_table

CURVE = {1: 1.0, 2: 1.3, 4: 2.0}  # a firing at k lanes over one lane's


def group_problem(seed: int, cpu_speeds: list[float], gpu_speed: float, affine: float) -> Problem:
    """The whole model of a random CNN on CPU cores of the given speeds (each of its own kind,
    so no two make a uniform group) and a GPU `gpu_speed` times a core of speed 1, whose batch
    table gives t(b, k) = t1 * CURVE[k] * (affine + (1 - affine) * b). (The whole model on a
    group moves nothing between elements: no transfer costs.)"""
    graph = random_cnn_graph(4, seed)
    work = np.random.default_rng(seed).uniform(0.2e-3, 2e-3, len(graph.layers))
    cpus = [ProcessingElement(f"cpu{i}", "cpu", (i,), cluster=f"c{i}")
            for i in range(len(cpu_speeds))]
    gpu = ProcessingElement("gpu0", "gpu", (100,), device_index=0, model="gpu")
    elements = [*cpus, gpu]
    times = np.column_stack([work / s for s in [*cpu_speeds, gpu_speed]])
    p = Problem(graph, elements, times, lambda nbytes, src, dst: 0.0, call_overhead=0.0,
                lane_slowdown={"gpu0": dict(CURVE)})
    t1 = p.actor_time([l.name for l in graph.layers], "gpu0")
    return with_batches(p, {"gpu0": batch_table(t1, CURVE, affine)})


def copies(p: Problem, lanes: int, batch: int) -> Mapping:
    actor = group_name([e.name for e in p.elements])
    return Mapping({l.name: actor for l in p.graph.layers}, lanes={"gpu0": lanes},
                   batch={"gpu0": batch} if batch > 1 else {})


def simulate(members: list[tuple[int, int, float]], frames: int, rate: float | None = None
             ) -> dict[str, np.ndarray]:
    """The group's dispatch, event by event: `members` (lanes, batch, seconds a firing); the
    lane that is free first takes the next min(b, left) frames (a CPU copy: one) and fires once
    the last of them arrived (frame f at f / `rate`; None: all there at once). Returns, per
    frame, when it arrived, when its firing started and ended, and when it left in order."""
    arrive = np.zeros(frames) if rate is None else np.arange(frames) / rate
    start, end = np.zeros(frames), np.zeros(frames)
    free = [(0.0, m, lane) for m, (k, _, _) in enumerate(members) for lane in range(k)]
    heapq.heapify(free)
    nxt = 0
    while nxt < frames:
        at, m, lane = heapq.heappop(free)
        _, b, t = members[m]
        block = range(nxt, min(frames, nxt + b))
        nxt = block[-1] + 1
        go = max(at, arrive[block[-1]])
        start[block], end[block] = go, go + t
        heapq.heappush(free, (go + t, m, lane))
    return {"arrive": arrive, "start": start, "end": end,
            "leave": np.maximum.accumulate(end)}


def steady_rate(sim: dict[str, np.ndarray], warmup: int) -> float:
    """Frames a second from the release of frame `warmup` to the last frame's start, counting
    the frames that ended in between (as the engine's report counts a run)."""
    t0, t1 = sim["leave"][warmup], sim["start"].max()
    return float(np.sum((sim["end"] > t0) & (sim["end"] <= t1)) / (t1 - t0))


def members_of(p: Problem, m: Mapping, affine: float) -> list[tuple[int, int, float]]:
    """(lanes, batch, seconds a firing) of each member: a core's whole-model time, the GPU's
    t(b, k) as its batch table was made (`group_problem`)."""
    whole = [l.name for l in p.graph.layers]
    k, b = m.lanes_of("gpu0"), m.batch_of("gpu0")
    gpu = p.actor_time(whole, "gpu0") * CURVE[k] * (affine + (1 - affine) * b)
    return [(1, 1, p.actor_time(whole, e.name)) for e in p.elements if e.kind == "cpu"] + \
        [(k, b, gpu)]


DRAWS = dict(seed=st.integers(0, 500), cpu_speeds=st.lists(st.floats(0.5, 2.0), min_size=1,
                                                           max_size=4),
             gpu_speed=st.floats(2.0, 20.0), k=st.sampled_from(sorted(CURVE)),
             b=st.sampled_from([1, 2, 4, 8, 16]), affine=st.floats(0.3, 0.95))


@settings(max_examples=40, deadline=None)
@given(**DRAWS)
def test_fed_flat_out_the_group_runs_the_sum_of_its_members_rates(seed, cpu_speeds, gpu_speed,
                                                                  k, b, affine):
    p = group_problem(seed, cpu_speeds, gpu_speed, affine)
    m = copies(p, k, b)
    members = members_of(p, m, affine)
    metrics = evaluate(p, m)
    assert metrics.throughput == pytest.approx(sum(n * c / t for n, c, t in members), rel=1e-9)
    slowest = max(t for _, _, t in members)
    frames = min(60_000, int(80 * metrics.throughput * slowest) + 10 * k * b)
    sim = simulate(members, frames)
    warm = frames // 10
    assert steady_rate(sim, warm) == pytest.approx(metrics.throughput, rel=0.03)
    # a frame leaves at most the slowest member's firing after it was taken, the slowest
    # member's frames exactly that: the saturated latency the model predicts
    took = sim["leave"][warm:] - sim["start"][warm:]
    assert took.max() == pytest.approx(saturated_latency(p, m), rel=1e-6)
    assert took.max() == pytest.approx(slowest, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(**DRAWS)
def test_paced_at_its_rate_a_frame_waits_for_a_block_and_the_slowest_member(
        seed, cpu_speeds, gpu_speed, k, b, affine):
    """Frames at 0.9 of the predicted rate, every batch full: the worst frame takes about the
    model's latency, the slowest member's firing after the b - 1 frames of a block (at the
    plan's rate a lane finds its block come: the frames of the block wait ahead of any later
    frame), and never less than a core's firing, or a block's fill at that rate and its run.
    Over 500 random draws the worst frame was 0.74-1.16 of the model (median 1.00, 90% within
    0.90-1.05); the low ones are rates at which a lane keeps up without a queue."""
    p = group_problem(seed, cpu_speeds, gpu_speed, affine)
    m = copies(p, k, b)
    members = members_of(p, m, affine)
    metrics = evaluate(p, m)
    gpu_run = members[-1][2]
    cpu_run = max(t for _, _, t in members[:-1])
    assert metrics.latency == pytest.approx(max(cpu_run, gpu_run) + (b - 1) / metrics.throughput,
                                            rel=1e-6)
    rate = 0.9 * metrics.throughput
    frames = min(60_000, int(80 * rate * max(cpu_run, gpu_run)) + 10 * k * b)
    sim = simulate(members, frames, rate)
    worst = (sim["leave"] - sim["arrive"])[frames // 10:].max()
    assert worst >= max(cpu_run, gpu_run + (b - 1) / rate) * (1 - 1e-9)
    assert worst <= 1.3 * metrics.latency


def test_a_gpu_among_cpu_copies_is_batched_where_the_batch_pays():
    p = group_problem(0, [1.0, 1.0, 0.7], 10.0, affine=0.8)
    m = dataclasses.replace(copies(p, 1, 1), lanes={}, batch={})
    assert batchable(p, m, "gpu0")
    fitted, metrics = fit_lanes(p, m)
    assert fitted.batch_of("gpu0") > 1
    plain = evaluate(p, dataclasses.replace(fitted, batch={}))
    assert metrics.throughput > 1.5 * plain.throughput
    assert metrics.throughput == pytest.approx(
        sum(n * c / t for n, c, t in members_of(p, fitted, 0.8)), rel=1e-9)
    linear = group_problem(0, [1.0, 1.0, 0.7], 10.0, affine=0.0)  # a batch costs b runs
    assert fit_lanes(linear, m)[0].batch_of("gpu0") == 1


def test_a_static_pattern_gives_the_batched_member_its_share_to_fill_each_block():
    """A static pattern hands a member its next frames in the pattern: its block spans the
    frames between, so it fills at the member's share of the rate, not at the stream's."""
    p = group_problem(1, [1.0], 8.0, affine=0.8)
    dynamic = copies(p, 1, 8)
    static = dataclasses.replace(dynamic, dispatch_mode="static",
                                 dispatch={dynamic.actors[0]: [1, 1, 1, 0]})
    slowest = max(t for _, _, t in members_of(p, dynamic, 0.8))
    fast, slow = evaluate(p, dynamic), evaluate(p, static)
    assert fast.latency == pytest.approx(slowest + 7 / fast.throughput, rel=1e-6)
    assert slow.latency == pytest.approx(slowest + 7 / (0.75 * slow.throughput), rel=1e-6)


def test_the_contention_step_reads_a_batched_gpu_against_its_batchs_firing():
    """The bench's parallel baseline runs the GPU at (b, k) beside the busy copies: its rate
    there is read against a firing of b frames at k lanes. Half the rate the model promises
    scales the GPU's busy firings by 2; read as one frame's firings (a calibration that does
    not say the batch), the same run made the GPU b / factor times faster than that."""
    from types import SimpleNamespace

    from hetflow.mapping.calibration import with_contention

    p = dataclasses.replace(group_problem(2, [1.0], 10.0, affine=0.8),
                            lane_slowdown_busy={"gpu0": dict(CURVE)})
    k, b = 2, 8
    core, firing = (t for _, _, t in members_of(p, copies(p, k, b), 0.8))
    promised = k * b / firing
    profile = SimpleNamespace(whole_model={}, elements={})
    q, summary = with_contention(p, profile, {"gpu0": 0.5 * promised}, {"gpu0": k}, {"gpu0": b})
    assert q.lane_busy_scale["gpu0"] == pytest.approx(2.0)
    assert summary["busy_lane_scale"] == {"gpu0": 2.0}
    assert evaluate(q, copies(q, k, b)).throughput == pytest.approx(0.5 * promised + 1 / core)
    factor = p.batch_factor("gpu0", b, k, busy=True)
    plain, _ = with_contention(p, profile, {"gpu0": 0.5 * promised}, {"gpu0": k})
    assert plain.lane_busy_scale["gpu0"] == pytest.approx(2.0 * factor / b)
