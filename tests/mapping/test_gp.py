"""Geometric-programming split of one layer (Carballo-Hernandez et al.)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hetflow.errors import InputError
from hetflow.mapping.strategies import gp, pipeline
from hetflow.model.graph import CnnGraph
from hetflow.platform.spec import ProcessingElement


def exact_split(models: dict[str, gp.PartModel]) -> dict[str, float]:
    """min max_e (a_e x_e + c_e), sum x = 1, all linear: equal times T, by bisection."""
    lo, hi = 0.0, max(m.a + m.c for m in models.values())
    for _ in range(200):
        t = (lo + hi) / 2
        if sum(max(0.0, (t - m.c) / m.a) for m in models.values()) >= 1:
            hi = t
        else:
            lo = t
    return {e: max(0.0, (hi - m.c) / m.a) for e, m in models.items()}


@pytest.mark.parametrize("method", ["condensation", "penalty"])
def test_three_times_faster_gets_three_quarters(method):
    models = {"fast": gp.PartModel(1e-3, 1.0, 0.0, False),
              "slow": gp.PartModel(3e-3, 1.0, 0.0, False)}
    fr, t, info = gp.solve_split(models, method=method)
    assert fr["fast"] == pytest.approx(0.75, abs=1e-4)
    assert fr["slow"] == pytest.approx(0.25, abs=1e-4)
    assert t == pytest.approx(0.75e-3, rel=1e-4)
    assert info["method"] == method


@pytest.mark.parametrize("method", ["condensation", "penalty"])
def test_fixed_costs_match_the_exact_split(method):
    models = {"a": gp.PartModel(1e-3, 1.0, 1e-5, False),
              "b": gp.PartModel(2.5e-3, 1.0, 4e-5, False),
              "c": gp.PartModel(4e-3, 1.0, 2e-5, False)}
    fr, _, _ = gp.solve_split(models, method=method)
    want = exact_split(models)
    for e in models:
        assert fr[e] == pytest.approx(want[e], abs=2e-4)


def test_fitted_power_law_from_samples(factory):
    p = factory.problem(6, factory.elements(1, 1, power=False), seed=1,
                        call_overhead=0.0, transfer=lambda n, a, b: 0.0)
    layer = gp.heaviest_conv(p)
    xs = np.linspace(0.1, 1.0, 6)
    samples = {"gpu0": [(x, 2e-4 * x ** 0.5 + 1e-5) for x in xs]}  # a wide device: sublinear
    models = gp.part_models(p, layer, ["cpu0", "gpu0"], "cpu0", samples)
    assert models["gpu0"].fitted and models["gpu0"].b == pytest.approx(0.5, abs=1e-3)
    assert not models["cpu0"].fitted and models["cpu0"].b == 1.0
    fr, t, _ = gp.solve_split(models)
    assert models["cpu0"](fr["cpu0"]) == pytest.approx(t, rel=1e-3)
    assert models["gpu0"](fr["gpu0"]) == pytest.approx(t, rel=1e-3)  # balanced


def test_search_keeps_pipeline_mapping_and_recommends_a_split(factory):
    els = [ProcessingElement("cpu0", "cpu", (0,), cluster="c"),
           ProcessingElement("cpu1", "cpu", (1,), cluster="d")]
    p = factory.problem(8, els, seed=2, call_overhead=0.0, transfer=lambda n, a, b: 0.0)
    p.layer_times[:, 1] = 3 * p.layer_times[:, 0]  # cpu1: three times slower on every layer
    res = gp.search(p, apply="never")
    assert res.best.key() == pipeline.search(p).best.key()
    notes = res.notes
    assert notes["layer"] == gp.heaviest_conv(p)
    assert notes["applied"] == "no (apply=never)" and res.splits == [] and res.problem is None
    assert notes["fractions"]["cpu0"] == pytest.approx(0.75, abs=1e-3)
    assert sum(notes["channels"].values()) == p.graph.tensors[
        p.graph.layer(notes["layer"]).outputs[0]].shape[1]
    assert notes["linear_assumption"] == ["cpu0", "cpu1"]
    assert notes["speedup"] == pytest.approx(4 / 3, rel=1e-3)


def test_resource_budget_caps_a_fraction(factory):
    els = [ProcessingElement("cpu0", "cpu", (0,), cluster="c"),
           ProcessingElement("fpga0", "accel", (), model="fpga", resources={"alm": 300.0})]
    p = factory.problem(8, els, seed=3, call_overhead=0.0, transfer=lambda n, a, b: 0.0)
    p.layer_times[:, 1] = p.layer_times[:, 0] / 10  # the FPGA would take most of the layer
    res = gp.search(p, resource_use={"alm": 1000.0}, elements=["cpu0", "fpga0"])
    assert res.notes["fractions"]["fpga0"] == pytest.approx(0.3, abs=1e-3)
    skipped = gp.search(p, elements=["cpu0", "fpga0"]).notes["resources_skipped"]
    assert skipped == ["fpga0.alm: no resource_use given"]


def test_no_conv_layer(factory):
    p = factory.problem(4, factory.elements(2), seed=0)
    g = p.graph
    relus = [dataclasses.replace(l, op_type="Relu") for l in g.layers]
    p = dataclasses.replace(p, graph=CnnGraph(g.name, relus, g.tensors, g.inputs, g.outputs, g.model_hash))
    with pytest.raises(InputError, match="no Conv"):
        gp.search(p)
    with pytest.raises(InputError, match="not in the model"):
        gp.search(p, layer="nope")


def test_an_applied_split_is_a_plan_that_runs_and_equals_the_unsplit_model(factory):
    from hetflow.mapping.planner import search_plan
    from hetflow.model.split import concat_name, part_name
    from hetflow.runtime.api import run_plan

    els = [ProcessingElement("cpu0", "cpu", (0,), cluster="c"),
           ProcessingElement("cpu1", "cpu", (1,), cluster="d")]
    p = factory.problem(8, els, seed=2, call_overhead=0.0, transfer=lambda n, a, b: 0.0)
    p.layer_times[:, 1] = 3 * p.layer_times[:, 0]
    plan, res = search_plan(p, "gp", "test", apply="always")
    layer = res.notes["layer"]
    (split,) = plan.splits
    assert split.layer == layer and sum(split.sizes) == sum(res.notes["channels"].values())
    sp = res.problem
    parts = [part_name(layer, i) for i in range(len(split.sizes))]
    assert {plan.mapping.assignment[x] for x in parts} == {"cpu0", "cpu1"}
    assert plan.mapping.assignment[concat_name(layer)] == res.best.assignment[concat_name(layer)]
    # each part is predicted at its share of the whole layer's time on its element
    t = p.layer_times[p.layer_index[layer]]
    for i, x in enumerate(parts):
        share = split.sizes[i] / sum(split.sizes)
        np.testing.assert_allclose(sp.layer_times[sp.layer_index[x]], t * share)
    assert plan.predicted["throughput"] == pytest.approx(res.metrics.throughput)
    report = run_plan(plan, sp.graph, frames=9, warmup=1, check="all")
    assert report.checked_frames == 9 and report.max_abs_error < 1e-4


def test_a_split_by_rows_is_a_plan_that_runs_and_equals_the_unsplit_model(factory):
    """axis="rows": the heaviest conv's output rows over the two elements, its Slices and
    Concat on the layer's own actor, each part predicted at its share of the layer's time."""
    from hetflow.mapping.planner import search_plan
    from hetflow.model.split import concat_name, output_rows, part_name, slice_name
    from hetflow.runtime.api import run_plan

    els = [ProcessingElement("cpu0", "cpu", (0,), cluster="c"),
           ProcessingElement("cpu1", "cpu", (1,), cluster="d")]
    p = factory.problem(8, els, seed=2, call_overhead=0.0, transfer=lambda n, a, b: 0.0)
    p.layer_times[:, 1] = 3 * p.layer_times[:, 0]
    plan, res = search_plan(p, "gp", "test", apply="always", axis="rows")
    layer = res.notes["layer"]
    (split,) = plan.splits
    assert split.axis == "rows" and res.notes["axis"] == "rows"
    assert sum(split.sizes) == sum(res.notes["rows"].values()) == output_rows(p.graph, layer)
    assert res.notes["fractions"]["cpu0"] == pytest.approx(0.75, abs=1e-3)
    sp = res.problem
    parts = [part_name(layer, i) for i in range(len(split.sizes))]
    assert {plan.mapping.assignment[x] for x in parts} == {"cpu0", "cpu1"}
    home = res.best.assignment[concat_name(layer)]
    assert all(plan.mapping.assignment[slice_name(layer, i)] == home for i in range(len(parts)))
    t = p.layer_times[p.layer_index[layer]]
    for i, x in enumerate(parts):
        np.testing.assert_allclose(sp.layer_times[sp.layer_index[x]],
                                   t * split.sizes[i] / sum(split.sizes))
    report = run_plan(plan, sp.graph, frames=9, warmup=1, check="all")
    assert report.checked_frames == 9 and report.max_abs_error < 1e-4


def test_rows_are_asked_of_a_layer_rows_can_split(factory):
    p = factory.problem(6, factory.elements(2), seed=0)
    with pytest.raises(InputError, match="axis='cols': use channels or rows"):
        gp.search(p, axis="cols")
    other = next(l.name for l in p.graph.layers if l.op_type != "Conv")
    with pytest.raises(InputError, match=f"layer {other!r} is a"):
        gp.search(p, layer=other, axis="rows")


def test_apply_must_be_a_known_choice(factory):
    p = factory.problem(6, factory.elements(2), seed=0)
    with pytest.raises(InputError, match="apply='sometimes'"):
        gp.search(p, apply="sometimes")


def test_without_cvxpy_gp_says_what_to_install(factory, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_cvxpy(name, *a, **kw):
        if name == "cvxpy":
            raise ImportError("No module named 'cvxpy'")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_cvxpy)
    p = factory.problem(6, factory.elements(2), seed=0)
    with pytest.raises(InputError, match=r"needs cvxpy.*hetflow\[search\]"):
        gp.search(p)
