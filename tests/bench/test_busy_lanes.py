"""The parallel baseline's own GPU rate recalibrates the GPU's busy lane curve."""
from types import SimpleNamespace

import pytest

from hetflow.bench.core import busy_lane_scales
from hetflow.mapping.mapping import Mapping, group_name
from hetflow.mapping.problem import evaluate
from tests.mapping.conftest import make_elements, make_problem

CURVE = {1: 1.0, 2: 1.2, 4: 1.6, 8: 2.4}


def laned_problem():
    p = make_problem(6, make_elements(2, 1), call_overhead=0.0)
    p.lane_slowdown["gpu0"] = dict(CURVE)
    p.lane_slowdown_busy["gpu0"] = {k: 1.1 * v for k, v in CURVE.items()}
    return p


def test_the_scale_makes_the_curve_say_what_the_baseline_measured():
    p = laned_problem()
    layers = [l.name for l in p.graph.layers]
    t1 = p.actor_time(layers, "gpu0")
    curve_rate = 8 / (t1 * 1.1 * 2.4)
    report = SimpleNamespace(notes={"per_element_fps": {"gpu0": 0.8 * curve_rate,
                                                        "cpu0": 50.0, "cpu1": 50.0}})
    scale = busy_lane_scales(p, report, {"gpu0": 8})
    assert set(scale) == {"gpu0"} and scale["gpu0"] == pytest.approx(1 / 0.8)
    # the GPU beside the copies now fires at the measured rate; alone it keeps its own curve
    g = group_name(["cpu0", "gpu0"])
    beside = Mapping({l: g for l in layers}, lanes={"gpu0": 8})
    alone = Mapping({l: "gpu0" for l in layers}, lanes={"gpu0": 8})
    before = (evaluate(p, beside).throughput, evaluate(p, alone).throughput)
    p.lane_busy_scale.update(scale)
    cpu_rate = 1 / p.actor_time(layers, "cpu0")
    assert evaluate(p, beside).throughput == pytest.approx(cpu_rate + 0.8 * curve_rate, rel=1e-6)
    assert evaluate(p, beside).throughput < before[0]
    assert evaluate(p, alone).throughput == pytest.approx(before[1])
    # asking again with the scale in place gives the same scale, not its square
    assert busy_lane_scales(p, report, {"gpu0": 8})["gpu0"] == pytest.approx(scale["gpu0"])
