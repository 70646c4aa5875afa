import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hetflow.backends.together import run_together
from hetflow.errors import RuntimeFault


def test_every_worker_prepares_before_any_steps():
    prepared, early = set(), []
    lock = threading.Lock()

    def prepare(i):
        time.sleep(0.05 * i)
        with lock:
            prepared.add(i)

    def step(i):
        with lock:
            if len(prepared) < 3:
                early.append(i)
        return False

    run_together("t", ["a", "b", "c"], prepare, step)
    assert prepared == {0, 1, 2} and early == []


def test_done_stops_the_workers():
    counts = [0, 0]

    def step(i):
        counts[i] += 1
        time.sleep(0.001)
        return True

    t0 = time.perf_counter()
    start, stop = run_together("t", ["a", "b"], lambda i: None, step,
                               lambda elapsed: elapsed >= 0.1)
    assert t0 <= start < stop and stop - start >= 0.1 and all(c > 0 for c in counts)
    assert time.perf_counter() - t0 < 10


@pytest.mark.parametrize("where", ["prepare", "step"])
def test_a_failure_names_the_element_and_stops_everyone(where):
    def prepare(i):
        if where == "prepare" and i == 1:
            raise ValueError("no session")

    def step(i):
        if where == "step" and i == 1:
            raise ValueError("bad frame")
        time.sleep(0.001)
        return True  # the others would run forever without the stop

    with pytest.raises(RuntimeFault, match=r"^baseline: element gpu0: ValueError: "):
        run_together("baseline", ["cpu0", "gpu0"], prepare, step)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.floats(0.01, 1.0), min_size=1, max_size=12), min_size=1, max_size=4),
       st.floats(0.0, 1.0))
def test_frames_in_a_window_are_its_time_integral_of_each_copys_rate(durations, where):
    """Copies busy back to back from the window's start: the frames inside [start, stop] equal
    the integral over the window of each copy's instantaneous rate (1 / the frame under way),
    summed on a fine grid as the oracle."""
    from hetflow.backends.together import frames_in_window

    start = 5.0
    spans = []
    for ds in durations:
        t = start
        for d in ds:
            spans.append((t, t + d))
            t += d
    stop = start + where * min(sum(ds) for ds in durations)
    got = frames_in_window(spans, start, stop)
    steps = 100_000
    dt = (stop - start) / steps
    t = start + (np.arange(steps) + 0.5) * dt
    oracle = sum(float(np.count_nonzero((b <= t) & (t < e))) * dt / (e - b) for b, e in spans)
    assert got == pytest.approx(oracle, rel=1e-3, abs=1e-3)
