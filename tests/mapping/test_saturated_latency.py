"""The latency of a run fed as fast as it goes: the engine's channel windows, one frame more
each (a producer computes its next frame before it waits for room), the source not clocked."""
import numpy as np
import pytest

from hetflow.plan.mapping import Mapping
from hetflow.mapping.planner import make_plan
from hetflow.mapping.problem import Problem, evaluate, saturated_latency
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform.spec import ProcessingElement


def two_stages(t0: float, t1: float, capacity: int) -> tuple[Problem, Mapping]:
    """The first half of a random CNN's layers on cpu0 (t0 s a frame), the rest on cpu1."""
    graph = random_cnn_graph(4, 0)
    names = [l.name for l in graph.layers]
    cut = len(names) // 2
    per = [t0 / cut if i < cut else t1 / (len(names) - cut) for i in range(len(names))]
    elements = [ProcessingElement(f"cpu{i}", "cpu", (i,), cluster="c") for i in range(2)]
    problem = Problem(graph, elements, np.column_stack([per, per]), lambda n, s, d: 0.0,
                      call_overhead=0.0, capacity_frames=capacity)
    return problem, Mapping({l: f"cpu{int(i >= cut)}" for i, l in enumerate(names)})


@pytest.mark.parametrize("capacity", [1, 2, 4])
def test_frames_wait_in_front_of_a_slower_second_stage(capacity):
    # cpu0 may run capacity + 1 frames ahead of cpu1 (window plus the frame in hand), so each
    # frame waits that many of cpu1's 20 ms before its own 20 ms. The engine with runners that
    # sleep these times measured p99 60.9, 82.1 and 121.5 ms.
    problem, mapping = two_stages(0.010, 0.020, capacity)
    assert saturated_latency(problem, mapping) == pytest.approx(0.020 * (capacity + 2))
    assert evaluate(problem, mapping).latency == pytest.approx(0.030)  # a paced stream's


def test_a_slower_first_stage_keeps_the_paced_latency():
    problem, mapping = two_stages(0.020, 0.010, 2)
    assert saturated_latency(problem, mapping) == pytest.approx(0.030)


def test_a_plan_predicts_both_latencies():
    problem, mapping = two_stages(0.010, 0.020, 2)
    plan = make_plan(problem, mapping, evaluate(problem, mapping), "manual", "two",
                     interleave=False)
    assert plan.predicted["latency"] == pytest.approx(0.030)
    assert plan.predicted["latency_saturated"] == pytest.approx(0.080)
