import threading
import time

import pytest

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
    start = run_together("t", ["a", "b"], lambda i: None, step, lambda elapsed: elapsed >= 0.1)
    assert start >= t0 and all(c > 0 for c in counts)
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
