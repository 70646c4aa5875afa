"""Frame-interleaved phase orders in the local engine (Mapping.interleave): every order the
analysis calls live (with the plan's own FIFO windows) runs, with outputs equal to the reference
frame by frame and in order. (The converse does not hold: the engine's producers compute before
they wait for space, where the analysis has a firing claim its space when it starts, so the
engine runs some orders that the analysis, conservatively, calls deadlocked.)"""
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from hetflow.dataflow.analysis import throughput_mcr
from hetflow.dataflow.analysis.orders import unfolded
from hetflow.errors import DeadlockError
from hetflow.plan.orders import firing_orders
from hetflow.model.synthetic import random_cnn_graph
from hetflow.runtime.api import run_plan
from hetflow.plan.schedule import channel_windows, phase_sequence

GRAPHS = {(n, s): random_cnn_graph(n, s) for n in (8, 16) for s in range(4)}


def offsets_for(draw, phases: int) -> list[int]:
    """Offsets that never increase and end at 0."""
    steps = draw(st.lists(st.integers(0, 1), min_size=phases - 1, max_size=phases - 1))
    return [sum(steps[i:]) for i in range(phases - 1)] + [0]


def analysed_live(plan) -> bool:
    g = plan.app.to_graph(lambda p: 1.0, lambda c: 0.0, channel_windows(plan))
    try:
        throughput_mcr(unfolded(g, plan.mapping.round_frames),
                       firing_orders(plan.mapping, plan.app) or None)
    except DeadlockError:
        return False
    return True


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(GRAPHS)), data=st.data(), capacity=st.integers(1, 3))
def test_interleaved_orders_run_as_analysed_and_keep_outputs(plan_for, key, data, capacity):
    graph = GRAPHS[key]
    assignment = {l.name: data.draw(st.sampled_from(["pe0", "pe1", "pe2"])) for l in graph.layers}
    plan = plan_for(graph, assignment, capacity, "maximal")
    multi = [a for a, ps in plan.app.phases.items() if len(ps) > 1]
    assume(multi)
    plan.mapping.interleave = {a: offsets_for(data.draw, len(plan.app.phases[a])) for a in multi}
    plan.mapping.round_frames = data.draw(st.sampled_from([1, 1, 2, 3]))
    assume(plan.mapping.round_frames > 1 or any(any(o) for o in plan.mapping.interleave.values()))
    plan.check()
    assume(analysed_live(plan))
    report = run_plan(plan, graph, frames=11, warmup=1, check="all", stall_timeout=10.0)
    assert report.frames == 11 and report.checked_frames == 11
    assert report.max_abs_error < 1e-4


def test_phase_sequence_runs_rounds_of_offsets():
    # round i fires phase 0 of frame i + 1, then phase 1 of frame i
    assert list(phase_sequence(range(3), [1, 0])) == [(0, 0), (1, 0), (0, 1), (2, 0), (1, 1),
                                                      (2, 1)]
    assert list(phase_sequence(iter([4, 7]), [0, 0])) == [(4, 0), (4, 1), (7, 0), (7, 1)]
    assert list(phase_sequence([], [2, 1, 0])) == []
    # rounds of two frames: phase 0 of frames 0 and 1, then phase 1 of both
    assert list(phase_sequence(range(3), [0, 0], 2)) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0),
                                                         (2, 1)]


@given(frames=st.integers(0, 12), k=st.integers(1, 3), data=st.data())
def test_phase_sequence_fires_every_phase_of_every_frame_once_in_phase_order(frames, k, data):
    offsets = offsets_for(data.draw, data.draw(st.integers(1, 5)))
    seq = list(phase_sequence(range(frames), offsets, k))
    assert sorted(seq) == [(f, p) for f in range(frames) for p in range(len(offsets))]
    for f in range(frames):  # a frame's phases in order
        mine = [p for g, p in seq if g == f]
        assert mine == sorted(mine)


@given(frames=st.integers(0, 12), phases=st.integers(1, 5))
def test_frame_by_frame_takes_a_frame_only_when_the_previous_one_is_fired(frames, phases):
    """A dynamic dispatcher hands a frame to a member ready to start it: a worker firing frame by
    frame must not take frame f + 1 before it fired the last phase of frame f."""
    pulled, fired = [], []

    def source():
        for f in range(frames):
            pulled.append((f, len(fired)))
            yield f

    for f, p in phase_sequence(source(), [0] * phases):
        fired.append((f, p))
    assert fired == [(f, p) for f in range(frames) for p in range(phases)]
    assert pulled == [(f, f * phases) for f in range(frames)]


def test_an_edited_plan_with_bad_offsets_is_refused(plan_for):
    from hetflow.errors import InputError

    graph = GRAPHS[(8, 0)]
    names = [l.name for l in graph.layers]
    plan = plan_for(graph, {l: "pe0" if i % 2 == 0 else "pe1" for i, l in enumerate(names)},
                    2, "maximal")
    actor = next(a for a, ps in plan.app.phases.items() if len(ps) > 1)
    n = len(plan.app.phases[actor])
    for bad, why in (([0] * (n + 1), "offsets for"), ([1] + [0] * (n - 2) + [1], "never increase"),
                     ([0] * (n - 1) + [-1], "never increase")):
        plan.mapping.interleave = {actor: bad}
        with pytest.raises(InputError, match=why):
            plan.check("p.json")
    plan.mapping.interleave = {"nobody": [0]}
    with pytest.raises(InputError, match="no actor 'nobody'"):
        plan.check("p.json")


def test_the_first_frame_of_an_interleaved_plan_may_take_its_predicted_latency(plan_for):
    from hetflow.runtime.engine import first_frame_wait

    graph = GRAPHS[(8, 0)]
    names = [l.name for l in graph.layers]
    plan = plan_for(graph, {l: "pe0" if i % 2 == 0 else "pe1" for i, l in enumerate(names)},
                    2, "maximal")
    plan.predicted["latency"] = 4.0
    assert first_frame_wait(plan) == 0.0  # frame by frame: the stall timeout alone
    actor = next(a for a, ps in plan.app.phases.items() if len(ps) > 1)
    plan.mapping.interleave = {actor: [1] + [0] * (len(plan.app.phases[actor]) - 1)}
    assert first_frame_wait(plan) == 4.0
    plan.predicted["latency"] = float("inf")  # never wait for ever
    assert first_frame_wait(plan) == 0.0


