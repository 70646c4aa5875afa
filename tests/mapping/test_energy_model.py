"""The predicted energy per frame: idle watts of the parts a plan uses over the frame period plus
each element's watts above idle over its busy share; read from a profile's power table where
measured, from the platform's power_w where not; the same figure `hetflow run` would measure
from counters on a machine whose power follows that model."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hetflow.backends.energy import CounterTrace
from hetflow.errors import InputError
from hetflow.mapping.energy import (ElementPower, element_powers, energy_method, frame_energy,
                                    measured_power, modelled_power, require_power)
from hetflow.mapping.problem import Problem
from hetflow.mapping.problem import evaluate
from hetflow.mapping.strategies.base import configurations
from hetflow.plan.mapping import Mapping
from hetflow.platform.spec import ProcessingElement
from hetflow.runtime.energy import part_of, run_energy
from hetflow.runtime.report import RunReport, latency_stats
from tests.mapping.conftest import random_small_problem

GPU = ProcessingElement("gpu0", "gpu", (4,), device_index=0)
CPU0 = ProcessingElement("cpu0", "cpu", (0,))
CPU1 = ProcessingElement("cpu1", "cpu", (1,))


def figure(watts, method="nvml"):
    return {"watts": watts, "method": method, "seconds": 2.0, "reliable": True, "note": ""}


# a profile's power table: the GPU idles at 60 W and draws 200 W at one lane, 400 W at 8 (its
# driving core adds 5 W to the CPU package); a core adds 10 W to a package idling at 20 W
TABLE = {
    "window_s": 2.0,
    "idle": {"gpu0": figure(60.0), "cpu": figure(20.0, "rapl")},
    "busy": {
        "gpu0": {"1,1": {"busy_share": 1.0, "copies": 1,
                         "parts": {"gpu0": figure(200.0), "cpu": figure(25.0, "rapl")}},
                 "1,8": {"busy_share": 1.0, "copies": 1,
                         "parts": {"gpu0": figure(400.0), "cpu": figure(25.0, "rapl")}}},
        "cpu0": {"1,1": {"busy_share": 1.0, "copies": 2,
                         "parts": {"gpu0": figure(60.0), "cpu": figure(30.0, "rapl")}}},
        "cpu1": {"1,1": {"busy_share": 1.0, "copies": 2,
                         "parts": {"gpu0": figure(60.0), "cpu": figure(30.0, "rapl")}}},
    },
    "missing": {},
}


def figures():
    return element_powers(TABLE, [GPU, CPU0, CPU1])[0]


def test_a_gpu_alone_pays_its_idle_power_and_its_rise_over_its_busy_share():
    f = figures()
    # 100 frames/s, the GPU busy half the time at 8 lanes: (60 + 0.5 x 340) W / 100
    assert frame_energy(f, {"gpu0": 0.5}, 100.0, {"gpu0": 8}, {}) == pytest.approx(2.3)
    # the CPU package is not one of its parts: its driving core's 5 W are not counted
    assert f["gpu0"].part == "gpu0" and f["gpu0"].method == "nvml"


def test_a_plan_on_both_parts_pays_both_idles_and_the_driving_core():
    f = figures()
    e = frame_energy(f, {"gpu0": 0.5, "cpu0": 1.0, "cpu1": 0.4}, 100.0, {"gpu0": 8}, {})
    idle = 60.0 + 20.0
    busy = 0.5 * (340.0 + 5.0) + 1.0 * 10.0 + 0.4 * 10.0
    assert e == pytest.approx((idle + busy) / 100.0)


def test_busy_power_is_linear_between_lane_counts_and_batch_one_stands_for_unmeasured_batches():
    gpu = figures()["gpu0"]
    parts = {"gpu0"}
    assert gpu.extra_w(1, 4, parts) == pytest.approx(140.0 + 200.0 * 3 / 7)
    assert gpu.extra_w(1, 16, parts) == pytest.approx(340.0)  # past the most lanes measured
    assert gpu.extra_w(8, 8, parts) == pytest.approx(340.0)  # no batch 8 row: batch 1's


@settings(max_examples=50, deadline=None)
@given(st.floats(1.0, 8.0), st.floats(0.0, 1.0))
def test_given_its_rates_a_gpu_draws_for_the_frames_it_runs_not_its_lanes(gain, at):
    """With the element's flat-out rate at each (batch, lanes), an unmeasured point's rise is
    linear in that rate between the measured points: b8 x4 running `at` of the way from the
    rate of one lane to that of eight draws `at` of the way from 140 W to 340 W, whatever its
    lanes; measured points stay as measured, and past the fastest the rise stays there."""
    gpu = figures()["gpu0"]
    parts = {"gpu0"}
    r1, r8 = 1.0, 1.0 + gain
    rates = {(1, 1): r1, (1, 8): r8, (8, 4): r1 + at * (r8 - r1), (32, 8): 2 * r8}
    rate = lambda b, k: rates.get((b, k))  # noqa: E731
    assert gpu.extra_w(8, 4, parts, rate) == pytest.approx(140.0 + at * 200.0)
    assert gpu.extra_w(1, 8, parts, rate) == pytest.approx(340.0)
    assert gpu.extra_w(32, 8, parts, rate) == pytest.approx(340.0)
    # without a rate for the point asked, the lane curve at batch 1 as before
    assert gpu.extra_w(2, 4, parts, rate) == gpu.extra_w(2, 4, parts)
    assert frame_energy(figures(), {"gpu0": 1.0}, 100.0, {"gpu0": 4}, {"gpu0": 8},
                        {"gpu0": rate}) == pytest.approx((60.0 + 140.0 + at * 200.0) / 100.0)


def test_a_window_the_element_was_busy_only_part_of_is_read_at_full_load():
    half = {**TABLE, "busy": {"gpu0": {"1,1": {"busy_share": 0.5, "copies": 1,
                                               "parts": {"gpu0": figure(130.0)}}}}}
    gpu = measured_power(half, GPU)
    assert gpu.busy_w[(1, 1)]["gpu0"] == pytest.approx(200.0)  # 60 + 70 / 0.5


def problem_of(elements, power, unmeasured, idle_fraction=0.0):
    """A problem over `elements` that only the power figures are read from."""
    return Problem(None, elements, None, None, idle_power_fraction=idle_fraction, power=power,
                   power_unmeasured=unmeasured)


def test_a_part_without_a_counter_is_modelled_from_power_w_and_says_why():
    table = {"idle": {"gpu0": figure(60.0)}, "busy": {}, "missing": {"cpu": "no RAPL: a VM"}}
    cpu = ProcessingElement("cpu0", "cpu", (0,), power_w=12.0)
    f, unmeasured = element_powers(table, [cpu])
    assert f == {} and unmeasured == {"cpu0": "no RAPL: a VM"}
    modelled = problem_of([cpu], f, unmeasured, idle_fraction=0.25).element_power("cpu0")
    assert modelled.method == "modelled (no RAPL: a VM)"
    assert modelled.idle_w == {"cpu0": 3.0} and modelled.busy_w == {(1, 1): {"cpu0": 12.0}}


def test_an_element_not_read_busy_beside_a_part_read_idle_rises_by_its_power_w():
    table = {**TABLE, "busy": {"cpu0": TABLE["busy"]["cpu0"]}}
    cpu1 = ProcessingElement("cpu1", "cpu", (1,), power_w=12.0)
    f, unmeasured = element_powers(table, [CPU0, cpu1, GPU])
    assert f["cpu1"].method == "rapl idle, modelled busy (the profile has no busy power of cpu1)"
    assert unmeasured == {"gpu0": "the profile has no busy power of gpu0"}
    # both cores busy: the package's idle once, the measured core's rise and cpu1's power_w
    got = frame_energy(f, {"cpu0": 1.0, "cpu1": 0.5}, 10.0, {}, {})
    assert got == pytest.approx((20.0 + 10.0 + 0.5 * 12.0) / 10.0)


def test_an_element_with_neither_a_counter_nor_power_w_is_named():
    table = {"idle": {}, "busy": {}, "missing": {"cpu": "no RAPL: a VM"}}
    p = problem_of([CPU0], *element_powers(table, [CPU0]))
    assert p.element_power("cpu0") is None
    with pytest.raises(InputError, match=r"^element cpu0 has no power figure: no energy "
                                         r"counter \(no RAPL: a VM\) and its platform gives "
                                         r"it no power_w"):
        require_power(p)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 400), st.floats(0, 1)), min_size=1, max_size=6),
       st.floats(0, 0.5), st.floats(0.5, 5000))
def test_modelled_elements_keep_the_nominal_formula(elements, idle_fraction, rate):
    """Where every element is modelled: each draws power_w x (u + idle share x (1 - u))."""
    els = [ProcessingElement(f"cpu{i}", "cpu", (i,), power_w=w) for i, (w, _) in enumerate(elements)]
    util = {e.name: u for e, (_, u) in zip(els, elements)}
    f = {e.name: modelled_power(e, idle_fraction, "no counter") for e in els}
    want = sum(w * (u + idle_fraction * (1 - u)) for w, u in elements) / rate
    assert frame_energy(f, util, rate, {}, {}) == pytest.approx(want)


def test_no_figure_without_every_element_or_a_rate():
    f = figures()
    assert frame_energy(f, {"gpu0": 0.5, "npu": 0.2}, 100.0, {}, {}) is None
    assert frame_energy(f, {"gpu0": 0.5}, 0.0, {}, {}) is None
    assert frame_energy(f, {"gpu0": 0.5}, float("inf"), {}, {}) is None


@settings(max_examples=40, deadline=None)
@given(st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.floats(5.0, 3000.0),
       st.sampled_from([1, 2, 5, 8]))
def test_the_prediction_is_what_run_measures_on_a_machine_that_follows_the_model(
        u_gpu, u0, u1, fps, lanes):
    """Counters of a machine whose parts draw idle + the rise of each busy element times its
    share (the model's own premise), read as `hetflow run` reads them: the two figures agree."""
    util = {"gpu0": u_gpu, "cpu0": u0, "cpu1": u1}
    f = figures()
    used = {"gpu0", "cpu"}
    watts = {p: TABLE["idle"][p]["watts"] for p in used}
    for e, u in util.items():
        key = "1,8" if e == "gpu0" and lanes >= 8 else "1,1"
        if e == "gpu0" and 1 < lanes < 8:
            for p in used:  # linear between the lane counts measured
                lo = TABLE["busy"][e]["1,1"]["parts"][p]["watts"]
                hi = TABLE["busy"][e]["1,8"]["parts"][p]["watts"]
                watts[p] += u * (lo + (hi - lo) * (lanes - 1) / 7 - watts_idle(p))
            continue
        for p in used:
            watts[p] += u * (TABLE["busy"][e][key]["parts"][p]["watts"] - watts_idle(p))
    window = 2.0
    measured = {p: [CounterTrace(p, "nvml" if p == "gpu0" else "rapl", 1.0, None, 1.0,
                                 [0.0, window], [0.0, w * window]).window(0.0, window)]
                for p, w in watts.items()}
    elements = {e.name: e for e in (GPU, CPU0, CPU1)}
    assert {part_of(e) for e in elements.values()} == used
    report = RunReport("plan", 100, 10, fps, latency_stats([1e-3]), util,
                       notes={"window_s": window}, window_at=(0.0, window))
    got = run_energy(report, elements, measured, {})["joules_per_frame"]
    assert frame_energy(f, util, fps, {"gpu0": lanes}, {}) == pytest.approx(got, rel=1e-9)


def watts_idle(part):
    return TABLE["idle"][part]["watts"]


# ---- through the cost model ---------------------------------------------------------------

def test_evaluate_predicts_with_the_measured_figures(factory):
    els = factory.elements(2, 1, power=False)
    table = {"idle": {"gpu0": figure(50.0), "cpu": figure(10.0, "rapl")}, "missing": {},
             "busy": {e.name: {"1,1": {"busy_share": 1.0, "copies": 1,
                                       "parts": {"gpu0": figure(250.0 if e.kind == "gpu" else 50.0),
                                                 "cpu": figure(14.0, "rapl")}}}
                      for e in els}}
    power, unmeasured = element_powers(table, els)
    assert unmeasured == {}
    p = factory.problem(5, els, seed=2, power=power)
    gpu = next(e.name for e in els if e.kind == "gpu")
    layers = [l.name for l in p.graph.layers]
    m = evaluate(p, Mapping({l: gpu for l in layers}))
    u = m.utilisation[gpu]
    assert m.energy_per_frame == pytest.approx((50.0 + u * 200.0) / m.throughput)
    assert energy_method(p, [gpu]) == "nvml"
    both = evaluate(p, Mapping({l: (gpu if i % 2 else "cpu0") for i, l in enumerate(layers)}))
    idle = 60.0
    rise = both.utilisation[gpu] * (200.0 + 4.0) + both.utilisation["cpu0"] * 4.0
    assert both.energy_per_frame == pytest.approx((idle + rise) / both.throughput)


def test_a_profile_without_power_models_every_element_from_power_w(factory):
    els = factory.elements(2)
    power, unmeasured = element_powers({}, els)
    p = factory.problem(4, els, seed=1, power=power, power_unmeasured=unmeasured)
    require_power(p)  # power_w on every element: modelled
    assert energy_method(p, ["cpu0", "cpu1"]) == "modelled (the profile measured no power)"


def test_an_element_power_is_frozen_data():
    gpu = figures()["gpu0"]
    assert isinstance(gpu, ElementPower)
    with pytest.raises(AttributeError):
        gpu.part = "cpu"


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.data())
def test_a_plans_watts_lie_between_its_parts_idle_and_every_element_flat_out(seed, data):
    """On random problems with measured powers and random mappings: the predicted watts
    (J/frame x frames/s) are at least the idle watts of the parts the plan uses and at most
    that plus every element's rise at full load."""
    p = random_small_problem(seed)
    idle = {"gpu0": data.draw(st.floats(10, 100)), "cpu": data.draw(st.floats(5, 50))}
    rise = {e.name: data.draw(st.floats(0, 300)) for e in p.elements}
    table = {"idle": {k: figure(w) for k, w in idle.items()}, "missing": {},
             "busy": {e.name: {"1,1": {"busy_share": 1.0, "copies": 1, "parts": {
                 part_of(e): figure(idle[part_of(e)] + rise[e.name])}}} for e in p.elements}}
    power, unmeasured = element_powers(table, p.elements)
    p = replace(p, power=power, power_unmeasured=unmeasured)
    config = data.draw(st.sampled_from(configurations(p)))
    layers = [l.name for l in p.graph.layers]
    mapping = Mapping({l: data.draw(st.sampled_from(config)) for l in layers})
    m = evaluate(p, mapping, with_latency=False)
    assume(0 < m.throughput < float("inf"))
    used = set(mapping.elements)
    floor = sum(idle[q] for q in {part_of(p.element(e)) for e in used})
    watts = m.energy_per_frame * m.throughput
    assert floor - 1e-6 <= watts <= floor + sum(rise[e] for e in used) + 1e-6
    assert all(0.0 <= u <= 1.0 for u in m.utilisation.values())
