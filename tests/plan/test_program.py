"""The compiled worker programs (receive, fire, send, deliver), checked without running anything:
on random graphs, mappings with replica groups, dispatch modes and interleaved phase orders,
every frame a worker takes gets each phase once and in order, each receive before its fire and
each send after it, one delivery after the last phase, in the order `phase_sequence` fires."""
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.plan.mapping import Mapping, group_members
from hetflow.plan.plan import Plan
from hetflow.platform.spec import ProcessingElement
from hetflow.model.synthetic import random_cnn_graph
from hetflow.errors import InputError
from hetflow.plan.program import (DELIVER, FIRE, RECV, SEND, batch_cycle, batch_phases,
                                  compile_programs, describe, rounds, worker_actions)
from hetflow.plan.schedule import phase_sequence

@pytest.fixture
def plan_for():
    """A plan of `assignment` over one-core CPU elements (no profile: nothing is run)."""
    def make(graph, assignment, capacity=2, policy="paper", dispatch=None):
        app = cnn_to_csdf(graph, assignment, policy)
        elements = {e: ProcessingElement(e, "cpu", (0,)) for a in app.phases
                    for e in group_members(a)}
        return Plan(graph.name, graph.model_hash, "", "test", Mapping(assignment, policy, dispatch=dispatch or {}), app,
                    elements, capacity, {"throughput": 0.0}, "test")
    return make


GRAPHS = {(n, s): random_cnn_graph(n, s) for n in (8, 16) for s in range(4)}
ELEMENTS = ["pe0", "pe1", "pe2", "pe0|pe1", "pe1|pe2|pe3"]


def offsets_for(draw, phases: int) -> list[int]:
    """Offsets that never increase and end at 0."""
    steps = draw(st.lists(st.integers(0, 2), min_size=phases - 1, max_size=phases - 1))
    return [sum(steps[i:]) for i in range(phases - 1)] + [0]


def random_plan(plan_for, data, key, policy):
    graph = GRAPHS[key]
    stages = data.draw(st.lists(st.sampled_from(ELEMENTS), min_size=1, max_size=3, unique=True)
                       .filter(lambda s: len({e for a in s for e in a.split("|")})
                               == sum(len(a.split("|")) for a in s)))
    assignment = {l.name: data.draw(st.sampled_from(stages)) for l in graph.layers}
    plan = plan_for(graph, assignment, 2, policy)
    plan.mapping.dispatch_mode = data.draw(st.sampled_from(["dynamic", "static"]))
    plan.mapping.interleave = {a: offsets_for(data.draw, len(ps))
                               for a, ps in plan.app.phases.items()
                               if len(ps) > 1 and data.draw(st.booleans())}
    plan.mapping.round_frames = data.draw(st.sampled_from([1, 1, 2, 3]))
    return plan


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(GRAPHS)), data=st.data(),
       policy=st.sampled_from(["paper", "maximal"]))
def test_every_frame_runs_each_phase_once_in_order_between_its_receives_and_sends(
        plan_for, key, data, policy):
    plan = random_plan(plan_for, data, key, policy)
    app = plan.app
    programs = compile_programs(plan)
    assert sorted((p.actor, p.element) for p in programs) == sorted(
        (a, e) for a in app.phases for e in group_members(a))
    for prog in programs:
        phases = len(app.phases[prog.actor])
        offsets = plan.mapping.interleave.get(prog.actor, [0] * phases)
        k = plan.mapping.round_frames if prog.actor in plan.mapping.interleave else 1
        mine = sorted(data.draw(st.sets(st.integers(0, 40), max_size=12)))
        run = list(worker_actions(prog, mine))
        fires = [(f, a.phase) for a, f, _ in run if a.kind == FIRE]
        assert fires == list(phase_sequence(mine, offsets, k))  # the engine's phase order
        pos = {(a.kind, f, a.phase, a.channel): i for i, (a, f, _) in enumerate(run)}
        assert len(pos) == len(run)  # no action twice on a frame
        loads = {t for t, rs in app.model_inputs.items() if prog.actor in rs}
        outputs = {t for t, w in app.model_outputs.items() if w == prog.actor}
        for f in mine:
            for p in range(phases):
                fire = pos[(FIRE, f, p, "")]
                for c in app.channels:
                    if c.dst == prog.actor and c.dst_phase == p:
                        assert pos[(RECV, f, p, c.name)] < fire
                    if c.src == prog.actor and c.src_phase == p:
                        assert pos[(SEND, f, p, c.name)] > fire
            delivered = [a for a, g, _ in run if a.kind == DELIVER and g == f]
            assert len(delivered) == 1 and set(delivered[0].tensors) == outputs
            assert pos[(DELIVER, f, phases - 1, "")] > pos[(FIRE, f, phases - 1, "")]
        for a, f, _ in run:  # model inputs are loaded by the first phase, before it fires
            assert a.kind != FIRE or set(a.tensors) == (loads if a.phase == 0 else set())
        # the frames a worker holds at once fit its ring of frame slots
        for a, f, n in run:
            live = {m for b, g, m in run[:run.index((a, f, n))] if b.kind == FIRE} - {
                m for b, g, m in run[:run.index((a, f, n))] if b.kind == DELIVER}
            assert len(live) <= prog.span


def test_the_parallel_copies_are_one_fire_and_one_delivery_a_frame(plan_for):
    graph = GRAPHS[(8, 0)]
    plan = plan_for(graph, {l.name: "pe0|pe1" for l in graph.layers}, 2, "maximal")
    programs = compile_programs(plan)
    assert [p.element for p in programs] == ["pe0", "pe1"]
    for p in programs:
        assert [a.kind for a in p.actions] == [FIRE, DELIVER]
        assert set(p.actions[0].tensors) == set(plan.app.model_inputs)
        assert set(p.actions[1].tensors) == set(plan.app.model_outputs)
        assert [(a.kind, f) for a, f, _ in worker_actions(p, [3, 5])] == [
            (FIRE, 3), (DELIVER, 3), (FIRE, 5), (DELIVER, 5)]


def test_a_static_schedule_prints_the_frames_each_member_takes(plan_for):
    graph = GRAPHS[(8, 1)]
    half = len(graph.layers) // 2
    plan = plan_for(graph, {l.name: "pe0|pe1" if i < half else "pe2"
                            for i, l in enumerate(graph.layers)}, 2, "paper",
                    dispatch={"pe0|pe1": [0, 0, 1]})
    plan.mapping.dispatch_mode = "static"
    assert compile_programs(plan) == compile_programs(plan)  # a function of the plan alone
    text = "\n".join(describe(plan, rounds=2))
    blocks = dict(re.findall(r"^(\w+) \(stage .*?:\n((?:  .*\n?)*)", text, re.M))
    fired = {el: [int(f) for f in re.findall(r"fire phase 0 of frame (\d+)", b)]
             for el, b in blocks.items()}
    # static: member 0 takes frames 0, 1, 3, 4; member 1 frames 2, 5; pe2 every frame
    assert fired == {"pe0": [0, 1], "pe1": [2, 5], "pe2": [0, 1]}
    assert "pe0 (stage pe0|pe1, member 0, static dispatch):" in text
    assert "send" in blocks["pe1"] and "recv" in blocks["pe2"]
    assert "deliver frame 1:" in blocks["pe2"]


def test_a_dynamic_schedule_prints_each_members_own_frames(plan_for):
    graph = GRAPHS[(8, 2)]
    plan = plan_for(graph, {l.name: "pe0|pe1" for l in graph.layers}, 2, "maximal")
    lines = describe(plan, rounds=3)
    assert lines[0] == "pe0 (stage pe0|pe1, member 0, dynamic dispatch):"
    assert [line for line in lines if "round" in line] == ["  round 0:", "  round 1:",
                                                           "  round 2:"] * 2
    assert "    fire phase 0 of frame #2 (loads input)" in lines  # its third, whichever
    alone = describe(plan_for(graph, {l.name: "pe0" for l in graph.layers}, 2, "maximal"))
    assert "    fire phase 0 of frame 2 (loads input)" in alone  # alone: every frame


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(GRAPHS)), data=st.data(), batch=st.integers(2, 8),
       policy=st.sampled_from(["paper", "maximal"]))
def test_a_batched_program_fires_each_phase_once_on_its_batch_between_receives_and_sends(
        plan_for, key, data, batch, policy):
    """Phase by phase, a batched worker receives each frame's inputs, fires once on the batch,
    then sends each frame's tensors; the last phase delivers each frame. A batched stage that
    interleaves its phases, or whose later phase takes what its earlier ones sent, is refused
    naming the element."""
    plan = random_plan(plan_for, data, key, policy)
    el = data.draw(st.sampled_from(sorted({e for a in plan.app.phases
                                           for e in group_members(a)})))
    actor = next(a for a in plan.app.phases if el in group_members(a))
    plan.mapping.batch = {el: batch}
    interleaved = actor in plan.mapping.interleave and (
        any(plan.mapping.interleave[actor]) or plan.mapping.round_frames > 1)
    if interleaved or batch_cycle(plan, actor) is not None:
        with pytest.raises(InputError, match=f"element {re.escape(el)}: a batched element"):
            compile_programs(plan)
        return
    prog = next(p for p in compile_programs(plan) if p.element == el)
    assert prog.batch == batch and prog.batch_wait == 0.0
    phases = batch_phases(prog)
    assert [f.phase for _, f, _ in phases] == sorted(ph.index for ph in plan.app.phases[actor])
    assert sum(len(pre) + 1 + len(post) for pre, _, post in phases) == len(prog.actions)
    for pre, fire, post in phases:
        assert all(a.kind == RECV and a.phase == fire.phase for a in pre)
        assert all(a.kind in (SEND, DELIVER) and a.phase == fire.phase for a in post)
    fires = [x for x in describe(plan, rounds=2) if f"(batch {batch})" in x]
    assert len(fires) == 2 * len(phases)  # two rounds of the batched member's phases
    if prog.members == 1:  # the frames it takes are known: 0..b-1 first
        first = f"0-{batch - 1}" if batch > 2 else "0, 1"
        assert any(f"fire phase {phases[0][1].phase} of frames {first} (batch {batch})" in x
                   for x in fires)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(GRAPHS)), data=st.data())
def test_a_long_run_keeps_a_few_frames_and_the_same_order(plan_for, key, data):
    """Over thousands of frames (past where `rounds` drops the frames it is done with) every
    worker still fires in `phase_sequence`'s order, n is each frame's index among its frames,
    and the frames held stay within a few spans."""
    plan = random_plan(plan_for, data, key, "paper")
    for prog in compile_programs(plan):
        phases = len(plan.app.phases[prog.actor])
        offsets = plan.mapping.interleave.get(prog.actor, [0] * phases)
        k = plan.mapping.round_frames if prog.actor in plan.mapping.interleave else 1
        mine = list(range(3, 3 + 300 * prog.span + data.draw(st.integers(0, 7)), 2))
        run = list(worker_actions(prog, mine))
        assert [(f, a.phase) for a, f, _ in run if a.kind == FIRE] == \
            list(phase_sequence(mine, offsets, k))
        assert all(mine[n] == f for _, f, n in run)
        held = max(len(got) for _, got in rounds(prog, iter(mine)))
        assert held <= 66 * prog.span
