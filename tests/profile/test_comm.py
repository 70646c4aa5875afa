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


def test_engine_handoff_is_half_a_round_trip_through_the_runtime_channels():
    import threading

    from hetflow.profile.comm import bench_engine_handoff

    cores = sorted(os.sched_getaffinity(0))
    h = bench_engine_handoff(cores[0], cores[-1], repeats=50)
    assert 0 < h < 0.05  # a thread wake-up: microseconds to a few ms on a loaded machine
    assert not [t for t in threading.enumerate() if t.name == "hetflow-handoff-echo"]
    assert os.sched_getaffinity(0) == set(cores)


def test_engine_handoff_counts_a_slow_consumer_wake(monkeypatch):
    """An oracle outside the channel: a consumer whose wake takes 20 ms more reads 20 ms more a
    round trip, 10 ms a hand-off (each round trip has one such wake; 20 ms, not less, so that
    the wake-ups of a loaded 2-core machine stay inside the tolerance)."""
    import time

    from hetflow.profile.comm import bench_engine_handoff
    from hetflow.runtime import engine

    cores = sorted(os.sched_getaffinity(0))
    base = bench_engine_handoff(cores[0], cores[-1], repeats=20)
    wait_for = engine.FrameChannel.wait_for

    def slow_wait(self, f, timeout):
        got = wait_for(self, f, timeout)
        if self.name == "hand-off there":
            time.sleep(0.02)
        return got

    monkeypatch.setattr(engine.FrameChannel, "wait_for", slow_wait)
    slow = bench_engine_handoff(cores[0], cores[-1], repeats=20)
    assert slow - base == pytest.approx(0.01, abs=0.004)  # half a round trip
