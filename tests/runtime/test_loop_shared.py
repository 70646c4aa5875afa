"""How a shared element's driver waits while a device run is in flight (`_wait_shared`)."""
import threading
import time

import numpy as np
import pytest

from hetflow.runtime import loop
from hetflow.runtime.harness import Control


class Run:
    def __init__(self):
        self.waited = False

    def finished(self) -> bool:
        return False

    def wait(self) -> None:
        self.waited = True


@pytest.mark.parametrize("spin, expect", [(0.0, loop.ARRIVAL_POLL), (3e-4, 0.0)])
def test_a_driver_alone_in_its_process_polls_its_runs_without_sleeping(monkeypatch, spin, expect):
    slept = []
    monkeypatch.setattr(loop.time, "sleep", slept.append)
    arrive = np.array([time.perf_counter() + 1.0])  # frame 0 arrives in a second
    waits = [(loop.ARRIVE, None, 0, "frame 0's arrival")]
    run = Run()
    loop._wait_shared(Control(), "gpu0", waits, ["a"], [arrive], threading.Event(), run, spin,
                      poll=True)
    # a sleeping thread's core woke late on the GPU machine: one alone in its process yields
    assert slept == [pytest.approx(expect)] and not run.waited


def test_with_nothing_due_and_runs_ending_in_order_the_oldest_run_is_waited_for():
    run = Run()
    loop._wait_shared(Control(), "gpu0", [None], ["a"], [None], threading.Event(), run, 3e-4,
                      poll=False)
    assert run.waited
