"""The problem's cost model: measured sub-networks and contention."""
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetflow.mapping.calibration import contended
from hetflow.mapping.from_profile import measured_subnets
from hetflow.plan.mapping import Mapping
from hetflow.mapping.problem import evaluate
from hetflow.plan.mapping import group_name, weighted_pattern
from hetflow.model.subnet import subnet_key


def on(problem, *elements):
    """The layers in order, split into contiguous runs over `elements`."""
    layers = [l.name for l in problem.graph.layers]
    k = -(-len(layers) // len(elements))
    return Mapping({l: elements[i // k] for i, l in enumerate(layers)})


def test_contention_slows_a_mapping_over_several_elements_but_not_one_alone(factory):
    p = factory.problem(8, factory.elements(2, 1))
    alone, shared = on(p, "gpu0"), on(p, "cpu0", "gpu0")
    before = [evaluate(p, m).throughput for m in (alone, shared)]
    q = contended(p, {"cpu0": 2.0, "cpu1": 2.0, "gpu0": 1.5})
    assert evaluate(q, alone).throughput == pytest.approx(before[0])
    assert evaluate(q, shared).throughput < before[1] / 1.4
    assert q.alone.contention == {} and q.contention["gpu0"] == 1.5
    # a new problem: the one given keeps its times, and scaling again replaces, not compounds
    assert p.contention == {} and evaluate(p, shared).throughput == pytest.approx(before[1])
    again = contended(q, {"cpu0": 2.0, "cpu1": 2.0, "gpu0": 1.5})
    assert np.allclose(again.layer_times, q.layer_times)


def test_a_stage_that_was_measured_whole_costs_what_was_measured(factory):
    p = factory.problem(6, factory.elements(2))
    layers = [l.name for l in p.graph.layers]
    prof = SimpleNamespace(
        subnet_times={"cpu0": {subnet_key(layers[:2]): {"median": 1e-4}},
                      "cpu7": {subnet_key(layers[:2]): {"median": 9.0}}},
        whole_model={"cpu0": {"median": 5e-3}, "cpu1": {"median": 6e-3},
                     "cpu7": {"median": 9.0}})
    got = measured_subnets(p.graph, prof, p.elements)
    whole = subnet_key(layers)
    assert got == {("cpu0", subnet_key(layers[:2])): 1e-4, ("cpu0", whole): 5e-3,
                   ("cpu1", whole): 6e-3}  # elements outside the problem are left out
    p.subnet_times.update(got)
    assert p.actor_time(layers, "cpu1") == 6e-3
    assert p.actor_time(layers[:2], "cpu0") == 1e-4
    summed = p.actor_time(layers[:3], "cpu0")  # not measured whole: the sum of its layers
    assert summed == pytest.approx(sum(p.layer_times[i, 0] for i in range(3))
                                   + p.element_overhead.get("cpu0", 0.0))
    p = contended(p, {"cpu1": 2.0})
    assert p.actor_time(layers, "cpu1") == pytest.approx(12e-3)
    assert p.alone.actor_time(layers, "cpu1") == pytest.approx(6e-3)


def test_a_dynamic_group_takes_frames_as_fast_as_its_members_go(factory):
    """Whole model on one GPU and many slow cores: with dynamic dispatch the group's rate is
    the sum of its members' rates, however coarse the pattern; static dispatch is held to the
    pattern's shares (each core gets at least one slot of it)."""
    p = factory.problem(6, factory.elements(12, 1))
    p.layer_times[:, p.element_index["gpu0"]] /= 20  # some 100x a core, as on the GPU machine
    layers = [l.name for l in p.graph.layers]
    names = [e.name for e in p.elements]
    times = [p.actor_time(layers, e) + p.call_overhead for e in names]
    actor = group_name(names)
    pattern = weighted_pattern(times, max_len=len(names))  # as coarse as it gets
    dynamic = Mapping({l: actor for l in layers}, dispatch={actor: pattern})
    static = Mapping({l: actor for l in layers}, dispatch={actor: pattern},
                     dispatch_mode="static")
    ideal = sum(1 / t for t in times)
    got = evaluate(p, dynamic)
    assert got.throughput == pytest.approx(ideal, rel=1e-6)
    assert all(u == pytest.approx(1.0) for u in got.utilisation.values())
    assert evaluate(p, static).throughput < 0.9 * ideal


def test_stage_times_under_load_are_used_as_measured(factory):
    """A plan's stages timed with all its elements busy replace the profile (and are not
    scaled again by the contention factor), the one-element plan included."""
    p = factory.problem(6, factory.elements(2, 1))
    layers = [l.name for l in p.graph.layers]
    p = contended(p, {"cpu0": 2.0, "cpu1": 2.0, "gpu0": 1.5})
    head, tail = layers[:3], layers[3:]
    m = Mapping({l: ("cpu0" if l in head else "gpu0") for l in layers})
    p = replace(p, loaded_times={("cpu0", subnet_key(head)): 4e-3,
                                 ("gpu0", subnet_key(tail)): 1e-3})
    assert p.actor_time(head, "cpu0") == 4e-3 and p.actor_time(tail, "gpu0") == 1e-3
    # the bottleneck is the 4 ms head (plus the per-firing overhead); transfers are added
    assert evaluate(p, m).throughput == pytest.approx(1 / (4e-3 + p.call_overhead), rel=0.05)
    alone = Mapping({l: "gpu0" for l in layers})
    p = replace(p, loaded_times={("gpu0", subnet_key(layers)): 2e-3})
    assert evaluate(p, alone).throughput == pytest.approx(1 / (2e-3 + p.call_overhead))
    p = replace(p, loaded_times={})
    assert evaluate(p, alone).throughput != pytest.approx(1 / (2e-3 + p.call_overhead))


def test_a_uniform_group_under_load_costs_its_members_mean(factory):
    p = factory.problem(4, factory.elements(2))
    layers = [l.name for l in p.graph.layers]
    key = subnet_key(layers)
    p = replace(p, loaded_times={("cpu0", key): 4e-3, ("cpu1", key): 6e-3})
    assert p.actor_time(layers, "cpu0|cpu1") == pytest.approx(5e-3)
    assert p.actor_time(layers, "cpu1") == 6e-3  # asked per member: that member's
    m = Mapping({l: "cpu0|cpu1" for l in layers})
    assert evaluate(p, m).throughput == pytest.approx(2 / (5e-3 + p.call_overhead))


def test_a_gpu_whole_model_costs_its_one_lane_firing_from_the_lane_table(factory):
    p = factory.problem(4, factory.elements(1, 1))
    whole = subnet_key(l.name for l in p.graph.layers)
    prof = SimpleNamespace(subnet_times={},
                           whole_model={"cpu0": {"median": 5e-3}, "gpu0": {"median": 3e-3}},
                           gpu_lanes={"gpu0": {"1": {"alone": {"median": 1.6e-3}},
                                               "8": {"alone": {"median": 2.4e-3}}}})
    got = measured_subnets(p.graph, prof, p.elements)
    assert got == {("cpu0", whole): 5e-3, ("gpu0", whole): 1.6e-3}


def test_a_stage_timed_at_its_lanes_costs_its_one_lane_firing_and_keeps_its_curve(factory,
                                                                                 tmp_path):
    """A stage's lane table (bench: time_gpu_stages) gives its one-lane time to the problem's
    measured sub-networks and its curve to the problem, through a saved and reloaded profile."""
    from hetflow.mapping.from_profile import problem_from_profile
    from hetflow.platform import CpuCluster, Platform
    from hetflow.platform.spec import Gpu
    from hetflow.profile.profile import Profile

    p = factory.problem(4, factory.elements(1, 1))
    head = [l.name for l in p.graph.layers][:2]
    key = subnet_key(head)
    stage = {"1": {"alone": {"median": 1e-3}}, "4": {"alone": {"median": 2.5e-3}}}
    prof = SimpleNamespace(subnet_times={}, whole_model={}, gpu_lanes={},
                           stage_lanes={"gpu0": {key: stage}})
    assert measured_subnets(p.graph, prof, p.elements) == {("gpu0", key): 1e-3}

    plat = Platform("t", (CpuCluster("c", (0, 1)),), (Gpu(0, "gpu", 1),))
    graph = p.graph
    real = Profile(graph.name, graph.model_hash, plat.name, plat.platform_hash)
    for e in ("cpu0", "gpu0"):
        real.layer_times[e] = {l.name: {"median": 1e-3} for l in graph.layers}
    real.gpu_lanes["gpu0"] = {"1": {"alone": {"median": 4e-3}}, "4": {"alone": {"median": 6e-3}}}
    real.stage_lanes["gpu0"] = {key: stage}
    real = Profile.load(real.save(tmp_path / "p.json"))
    problem = problem_from_profile(graph, real, plat)
    assert problem.stage_slowdown == {("gpu0", key): {1: 1.0, 4: 2.5}}
    assert problem.subnet_times[("gpu0", key)] == 1e-3
    assert problem.slowdown("gpu0", 4, busy=False, stage=key) == 2.5
    assert problem.slowdown("gpu0", 4, busy=False) == 1.5  # the whole model's curve


def test_a_cpu_firing_pays_for_its_border_bytes_but_a_whole_model_firing_does_not(factory):
    """Frame by frame over two cores the period is the sum of every firing and transfer
    (hand-worked: each phase's layers + call overhead + a + b x its input and output bytes);
    the whole model on one core, timed with its borders, gets nothing added."""
    p = factory.problem(6, factory.elements(2))
    layers = [l.name for l in p.graph.layers]
    mapping = on(p, "cpu0", "cpu1")
    whole = Mapping({l: "cpu0" for l in layers})
    before = evaluate(p, mapping)
    alone = evaluate(p, whole).throughput
    a, b = 2e-5, 1e-9
    p.border_cost.update({"cpu0": (a, b), "cpu1": (a, b)})
    from hetflow.mapping.problem import build_app

    app = build_app(p, mapping)
    border = sum(a + b * sum(p.graph.tensors[t].nbytes for t in (*ph.inputs, *ph.outputs))
                 for ps in app.phases.values() for ph in ps)
    after = evaluate(p, mapping)
    assert 1 / after.latency_isolated == pytest.approx(
        1 / (before.latency_isolated + border), rel=1e-9)
    assert after.throughput < before.throughput
    assert evaluate(p, whole).throughput == pytest.approx(alone)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), a=st.floats(0, 1e-4), b=st.floats(0, 1e-8))
def test_border_costs_never_make_a_mapping_faster(factory, seed, a, b):
    p = factory.small(seed)
    rng = np.random.default_rng(seed)
    names = [e.name for e in p.elements]
    mapping = Mapping({l.name: names[int(rng.integers(len(names)))] for l in p.graph.layers})
    before = evaluate(p, mapping, with_latency=False).throughput
    p.border_cost.update({e.name: (a, b) for e in p.elements if e.kind == "cpu"})
    assert evaluate(p, mapping, with_latency=False).throughput <= before * (1 + 1e-9)


def test_map_predicts_with_the_contention_the_profile_measured(factory, tmp_path):
    """Single-core copies that ran at half their rate alone while every core ran one: with
    `contention` the two cores' times double, so the copies on both are predicted at half the
    rate (hand-worked: 2 frames per 2 x 4 ms + the call overhead), while a mapping on one core
    (the machine to itself) is predicted as without; without the flag nothing is scaled."""
    from hetflow.mapping.from_profile import calibrated_problem, problem_from_profile
    from hetflow.platform import CpuCluster, Platform
    from hetflow.profile.profile import Profile

    graph = factory.problem(4, factory.elements(2, 0)).graph
    plat = Platform("t", (CpuCluster("c", (0, 1)),))
    prof = Profile(graph.name, graph.model_hash, plat.name, plat.platform_hash)
    for e in ("cpu0", "cpu1", "cpu0-1"):
        prof.layer_times[e] = {l.name: {"median": 1e-3} for l in graph.layers}
        prof.elements[e] = {"kind": "cpu"}
        prof.whole_model[e] = {"median": 4e-3}
    prof.calibration["busy_fps"] = {"cpu0": 125.0, "cpu1": 125.0}  # 8 ms a frame, busy
    prof = Profile.load(prof.save(tmp_path / "p.json"))
    plain = problem_from_profile(graph, prof, plat)
    busy, _ = calibrated_problem(graph, prof, plat)
    assert not plain.contention and busy.contention == {"cpu0": 2.0, "cpu1": 2.0, "cpu0-1": 2.0}
    layers = [l.name for l in graph.layers]
    copies = Mapping({l: "cpu0|cpu1" for l in layers})
    assert evaluate(plain, copies).throughput == pytest.approx(2 / (4e-3 + plain.call_overhead))
    assert evaluate(busy, copies).throughput == pytest.approx(2 / (8e-3 + busy.call_overhead))
    one = Mapping({l: "cpu0" for l in layers})
    assert evaluate(busy, one).throughput == pytest.approx(evaluate(plain, one).throughput)
