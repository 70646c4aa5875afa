"""The steady rate of a run (runtime/report.py)."""
import pytest

from hetflow.runtime.report import steady_throughput


def test_a_drain_burst_does_not_count_as_rate():
    # one frame a second, then the last three released at once (an interleaved element
    # finishing the phases of frames already begun when no new frame enters)
    done = [float(i) for i in range(10)] + [9.1, 9.2, 9.3]
    assert steady_throughput(done, 2, drain=3) == (pytest.approx(1.0), pytest.approx(7.0), 2)
    assert steady_throughput(done, 2)[0] > 1.3
    # too few frames to leave any out: the whole run counts
    assert steady_throughput([0.0, 1.0, 2.0], 0, drain=5)[0] == pytest.approx(1.0)
