"""The problem's cost model: measured sub-networks and contention."""
from types import SimpleNamespace

import pytest

from hetflow.mapping.from_profile import measured_subnets
from hetflow.mapping.mapping import Mapping
from hetflow.mapping.problem import evaluate
from hetflow.model.subnet import subnet_key

from conftest import make_elements, make_problem


def on(problem, *elements):
    """The layers in order, split into contiguous runs over `elements`."""
    layers = [l.name for l in problem.graph.layers]
    k = -(-len(layers) // len(elements))
    return Mapping({l: elements[i // k] for i, l in enumerate(layers)})


def test_contention_slows_a_mapping_over_several_elements_but_not_one_alone():
    p = make_problem(8, make_elements(2, 1))
    alone, shared = on(p, "gpu0"), on(p, "cpu0", "gpu0")
    before = [evaluate(p, m).throughput for m in (alone, shared)]
    p.apply_contention({"cpu0": 2.0, "cpu1": 2.0, "gpu0": 1.5})
    assert evaluate(p, alone).throughput == pytest.approx(before[0])
    assert evaluate(p, shared).throughput < before[1] / 1.4
    assert p.alone.contention == {} and p.contention["gpu0"] == 1.5


def test_a_stage_that_was_measured_whole_costs_what_was_measured():
    p = make_problem(6, make_elements(2))
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
    p.apply_contention({"cpu1": 2.0})
    assert p.actor_time(layers, "cpu1") == pytest.approx(12e-3)
    assert p.alone.actor_time(layers, "cpu1") == pytest.approx(6e-3)
