"""Calibration steps are values: each returns a new cost model from the one given and plain
measurements, leaves the one given as it was, and applying a step again replaces what it did."""
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetflow.mapping.calibration import apply_step, calibrate, contended
from hetflow.plan.mapping import Mapping
from hetflow.mapping.problem import evaluate
from tests.mapping.conftest import make_elements, make_problem

factors = st.floats(1.0, 4.0)


def _profile(p):
    """A profile-like record: each element's whole model alone, and its kind."""
    layers = [l.name for l in p.graph.layers]
    return SimpleNamespace(
        source="test", whole_model={e.name: {"median": p.actor_time(layers, e.name)}
                                    for e in p.elements},
        elements={e.name: {"kind": e.kind} for e in p.elements})


@settings(max_examples=40, deadline=None)
@given(st.integers(3, 9), st.integers(0, 1000), factors, factors)
def test_contention_is_a_new_problem_and_replaces_not_compounds(n_layers, seed, f, g):
    p = make_problem(n_layers, make_elements(2, 1), seed=seed)
    times = p.layer_times.copy()
    layers = [l.name for l in p.graph.layers]
    both = Mapping({l: ("cpu0" if i % 2 else "cpu1") for i, l in enumerate(layers)})
    alone = Mapping({l: "cpu0" for l in layers})
    q = contended(p, {"cpu0": f, "cpu1": f})
    assert np.array_equal(p.layer_times, times) and p.contention == {}
    assert np.allclose(contended(q, {"cpu0": g, "cpu1": g}).layer_times,
                       contended(p, {"cpu0": g, "cpu1": g}).layer_times)
    # a slowdown never speeds a shared mapping up, and one element alone keeps the machine
    assert evaluate(q, both).throughput <= evaluate(p, both).throughput * (1 + 1e-9)
    assert evaluate(q, alone).throughput == pytest.approx(evaluate(p, alone).throughput)


@settings(max_examples=25, deadline=None)
@given(st.integers(3, 8), st.integers(0, 1000), st.floats(0.2, 1.0))
def test_the_contention_step_reads_the_busy_rates_as_slowdowns(n_layers, seed, share):
    """Every core ran a copy at `share` of its rate alone: its factor is 1 / share; the step's
    record names it, and calibrate lists the steps applied after the profile."""
    p = make_problem(n_layers, make_elements(2), seed=seed)
    prof = _profile(p)
    busy = {e: share / st_["median"] for e, st_ in prof.whole_model.items()}
    q, steps = calibrate(p, prof, {"contention": {"busy_fps": busy, "busy_lanes": {},
                                                  "source": "test"}})
    assert [s["step"] for s in steps] == ["profile", "contention"]
    for e in ("cpu0", "cpu1"):
        assert q.contention[e] == pytest.approx(1 / share)
        assert steps[1]["factors"][e] == pytest.approx(1 / share, rel=1e-3)
    assert p.contention == {}
    same, again = calibrate(p, prof, {})
    assert same is p and [s["step"] for s in again] == ["profile"]


def test_an_unknown_step_is_refused_naming_it():
    from hetflow.errors import InputError

    p = make_problem(3, make_elements(1))
    with pytest.raises(InputError, match="'batches'"):
        apply_step(p, _profile(p), "batches", {})
    with pytest.raises(InputError, match="'batches'"):
        calibrate(p, _profile(p), {"batches": {}})


@settings(max_examples=25, deadline=None)
@given(st.integers(3, 8), st.integers(0, 1000), st.floats(1.0, 1.5))
def test_copies_faster_than_the_profile_correct_their_cores_down_and_no_other(n_layers, seed,
                                                                           share):
    """The cores' copies ran at `share` >= 1 of the profile's rate alone (the profile read them
    slow): the cores that ran a copy take 1 / share, below 1.0; a core the copies never ran
    keeps 1.0, so a configuration measured only alone is never predicted faster than that."""
    p = make_problem(n_layers, make_elements(2, big=1), seed=seed)
    prof = _profile(p)
    busy = {e: share / prof.whole_model[e]["median"] for e in ("cpu0", "cpu1")}
    q, _ = calibrate(p, prof, {"contention": {"busy_fps": busy, "busy_lanes": {},
                                              "source": "test"}})
    assert q.contention["cpu0"] == pytest.approx(1 / share)
    assert q.contention["cpu1"] == pytest.approx(1 / share)
    assert q.contention["big0"] == 1.0
