"""The accuracy module: deviations of a run from the fp32 reference, tolerances and reports."""
import json
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hetflow.errors import InputError
from hetflow.model.accuracy import (Tolerance, compare_runs, frame_deviation,
                                    is_classifier_shaped)

shapes = st.sampled_from([(1, 10), (1, 1000), (1, 8, 4, 4), (3,), (1, 5, 1, 1), (2, 6)])
finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)


@st.composite
def frames(draw, n_max=6):
    shape = draw(shapes)
    n = draw(st.integers(1, n_max))
    return [{"out": draw(hnp.arrays(np.float32, shape, elements=finite))} for _ in range(n)]


@given(frames())
def test_identical_outputs_deviate_by_nothing_and_pass(ref):
    report = compare_runs([dict(f) for f in ref], ref, Tolerance(rel_l2=0.0))
    o = report.outputs[0]
    assert report.passed and o.rel_l2_worst == 0 and o.max_abs_worst == 0
    assert o.top1_agreement in (None, 1.0)
    assert o.frames == len(ref)


@settings(max_examples=60)
@given(ref=hnp.arrays(np.float64, st.sampled_from([(1, 100), (4, 8, 8)]),
                      elements=st.floats(-10, 10, allow_nan=False)),
       direction=st.integers(0, 2**32 - 1), size=st.floats(1e-4, 0.5))
def test_a_perturbation_of_known_relative_size_is_measured_as_that_size(ref, direction, size):
    norm = np.linalg.norm(ref)
    assume(norm > 1e-3)
    noise = np.random.default_rng(direction).standard_normal(ref.shape)
    got = ref + noise / np.linalg.norm(noise) * size * norm
    d = frame_deviation(got, ref)
    assert d.rel_l2 == pytest.approx(size, rel=1e-9)
    assert d.max_abs == pytest.approx(np.max(np.abs(got - ref)))


@given(classes=st.integers(2, 50), right=st.integers(0, 49), wrong=st.integers(0, 49),
       n=st.integers(1, 8), flips=st.integers(0, 8))
def test_top1_flips_are_counted_and_judged(classes, right, wrong, n, flips):
    right, wrong, flips = right % classes, wrong % classes, min(flips, n)
    assume(right != wrong)

    def scores(top):
        s = np.zeros((1, classes), np.float32)
        s[0, top] = 1.0
        return {"logits": s}

    ref = [scores(right) for _ in range(n)]
    got = [scores(wrong) if i < flips else scores(right) for i in range(n)]
    o = compare_runs(got, ref, Tolerance(rel_l2=10.0, top1_flips=0.0)).outputs[0]
    assert o.top1_agreement == pytest.approx((n - flips) / n)
    assert o.passed == (flips == 0)
    assert compare_runs(got, ref, Tolerance(rel_l2=10.0, top1_flips=flips / n)).passed


def test_worst_and_median_over_frames():
    ref = [{"y": np.ones(4, np.float32)} for _ in range(3)]
    got = [{"y": np.ones(4, np.float32) * (1 + e)} for e in (0.01, 0.02, 0.1)]
    o = compare_runs(got, ref, Tolerance(rel_l2=0.05)).outputs[0]
    assert o.rel_l2_worst == pytest.approx(0.1, rel=1e-6)
    assert o.rel_l2_median == pytest.approx(0.02, rel=1e-5)
    assert not o.passed and o.failures[0].startswith("rel_l2 0.1 > 0.05")


def test_max_abs_is_judged_only_when_limited():
    ref = [{"y": np.full(4, 100.0, np.float32)}]
    got = [{"y": np.full(4, 101.0, np.float32)}]
    assert compare_runs(got, ref, Tolerance(rel_l2=0.05)).passed
    r = compare_runs(got, ref, Tolerance(rel_l2=0.05, max_abs=0.5))
    assert not r.passed and r.outputs[0].failures == ("max_abs 1 > 0.5",)


def test_not_finite_deviations_fail_and_the_report_is_strict_json():
    ref = [{"a": np.ones((1, 3), np.float32), "b": np.zeros(2, np.float32)}]
    got = [{"a": np.array([[np.nan, 1, 1]], np.float32), "b": np.ones(2, np.float32)}]
    report = compare_runs(got, ref, label="x on cpu0@int8")
    assert not report.passed and all(not o.passed for o in report.outputs)
    text = json.dumps(report.to_dict(), allow_nan=False)
    back = json.loads(text)
    assert back["outputs"][0]["rel_l2_worst"] is None and back["outputs"][1]["rel_l2_worst"] is None
    assert back["label"] == "x on cpu0@int8" and back["frames"] == 1


def test_fp16_outputs_are_compared_without_overflow():
    ref = np.full((1, 8), 60000.0, np.float32)
    got = ref.astype(np.float16)
    assert math.isfinite(frame_deviation(got, ref).rel_l2)


@pytest.mark.parametrize("shape,yes", [((1, 1000), True), ((1000,), True), ((1, 10, 1, 1), True),
                                       ((1, 1), False), ((2, 10), False), ((1, 8, 4, 4), False)])
def test_classifier_shapes(shape, yes):
    assert is_classifier_shaped(shape) == yes


@pytest.mark.parametrize("kwargs,says", [
    ({"rel_l2": -0.1}, "tolerance rel_l2: -0.1 is below zero"),
    ({"top1_flips": -1}, "tolerance top1_flips: -1 is below zero"),
    ({"max_abs": -2.0}, "tolerance max_abs: -2.0 is below zero"),
    ({"top1_flips": 1.5}, "tolerance top1_flips: 1.5 is a share of frames"),
    ({"rel_l2": float("nan")}, "tolerance rel_l2: expected a number"),
])
def test_a_bad_tolerance_is_an_input_error_naming_the_setting(kwargs, says):
    with pytest.raises(InputError) as e:
        Tolerance(**kwargs)
    assert str(e.value).startswith(says)


def test_a_tolerance_is_read_from_a_setting():
    assert Tolerance.parse("rel_l2=0.02, top1_flips=0.1") == Tolerance(0.02, 0.1, None)
    with pytest.raises(InputError, match=r"^--tolerance: tolerance rel_l2: -1.0 is below zero"):
        Tolerance.parse("rel_l2=-1")
    with pytest.raises(InputError, match=r"^--tolerance: cannot read 'speed=2'"):
        Tolerance.parse("speed=2")
    with pytest.raises(InputError, match=r"^--tolerance: max_abs: 'x' is not a number"):
        Tolerance.parse("max_abs=x")


def test_frames_must_line_up():
    ref = [{"y": np.ones(2)}]
    with pytest.raises(ValueError, match="2 frames compared with 1"):
        compare_runs(ref * 2, ref)
    with pytest.raises(ValueError, match="output 'y' is missing"):
        compare_runs([{"z": np.ones(2)}], ref)
