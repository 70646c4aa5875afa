import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hetflow.profile import fit_linear
from hetflow.profile.comm import bench_cpu_handoff

SIZES = np.array([4 ** k * 1024 for k in range(9)], dtype=float)


@settings(max_examples=40, deadline=None)
@given(st.floats(1e-6, 1e-3), st.floats(1e-11, 1e-8), st.integers(0, 2 ** 32 - 1))
def test_fit_recovers_a_known_linear_model(a, b, seed):
    rng = np.random.default_rng(seed)
    y = (a + b * SIZES) * rng.uniform(0.98, 1.02, SIZES.shape)  # 2% noise
    fit = fit_linear(SIZES, y)
    assert fit["b"] == pytest.approx(b, rel=0.05)
    # the intercept is only identifiable where it is not drowned by the smallest transfer's slope
    assert fit["a"] == pytest.approx(a, rel=0.1, abs=0.05 * b * SIZES[0] + 0.03 * a)


def test_fit_is_exact_without_noise_and_never_negative():
    fit = fit_linear([1e3, 1e6, 1e9], [2e-5 + 1e-10 * x for x in (1e3, 1e6, 1e9)])
    assert fit["a"] == pytest.approx(2e-5) and fit["b"] == pytest.approx(1e-10)
    fit = fit_linear([1e3, 1e6], [1e-3, 1e-6])  # decreasing data: clamp to a valid model
    assert fit["a"] >= 0 and fit["b"] >= 0
    assert fit_linear([1e3], [5e-6]) == {"a": 5e-6, "b": 0.0}


def test_handoff_between_two_cores_is_measured():
    cores = sorted(os.sched_getaffinity(0))
    pts = bench_cpu_handoff(cores[0], cores[-1], sizes=[1024, 1 << 20], repeats=3)
    assert [p[0] for p in pts] == [1024, 1 << 20]
    assert all(0 < p[1] < 1.0 for p in pts)
    assert os.sched_getaffinity(0) == set(cores)  # the caller's affinity is restored
