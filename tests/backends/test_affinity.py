"""Thread placement and scheduling policy helpers."""
import os
import threading

import pytest

from hetflow.backends.affinity import realtime_process

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setscheduler"), reason="Linux only")


def _policies() -> set[int]:
    return {os.sched_getscheduler(int(t)) for t in os.listdir("/proc/self/task")}


def test_realtime_process_covers_every_thread_and_restores_the_normal_policy():
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        with realtime_process(1) as rt:
            during = _policies()
        if rt:  # allowed here (root or CAP_SYS_NICE): every thread, the other one included
            assert during == {os.SCHED_FIFO}
        else:
            assert during == {os.SCHED_OTHER}
        assert _policies() == {os.SCHED_OTHER}
    finally:
        stop.set()
        other.join()
