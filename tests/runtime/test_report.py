"""The steady rate of a run (runtime/report.py)."""
import pytest

from hetflow.runtime.report import steady_throughput, stream_report


def test_a_drain_burst_does_not_count_as_rate():
    # one frame a second, then the last three released at once (an interleaved element
    # finishing the phases of frames already begun when no new frame enters)
    done = [float(i) for i in range(10)] + [9.1, 9.2, 9.3]
    assert steady_throughput(done, 2, drain=3) == (pytest.approx(1.0), pytest.approx(7.0), 2)
    assert steady_throughput(done, 2)[0] > 1.3
    # too few frames to leave any out: the whole run counts
    assert steady_throughput([0.0, 1.0, 2.0], 0, drain=5)[0] == pytest.approx(1.0)


def _stream(service: list[float], frames: int):
    """Members with fixed frame times, each taking the next frame as it comes free (dynamic
    dispatch, nothing else in the way), outputs released in input order: (release times,
    completion times in release order, when the last frame entered)."""
    free = [0.0] * len(service)
    start, end = [], []
    for _ in range(frames):
        m = min(range(len(service)), key=lambda i: free[i])
        start.append(free[m])
        free[m] += service[m]
        end.append(free[m])
    released, last = [], float("-inf")
    for e in end:
        last = max(last, e)
        released.append(last)
    return released, end, max(start)


@pytest.mark.parametrize("service", [[0.001, 0.5], [0.002, 0.002, 0.3, 0.3], [0.01]])
def test_a_slow_members_tail_does_not_count_as_rate(service):
    """A fast member beside slow ones: the stream's rate is the sum of the members' rates
    (the oracle); counted between releases, the window starts and ends on frames held behind
    a slow member's, and its end on a tail after which nothing enters."""
    rate = sum(1 / s for s in service)
    released, completed, last_entry = _stream(service, int(rate * 1.0))
    got = steady_throughput(released, 20, 0, completed, last_entry)[0]
    assert got == pytest.approx(rate, rel=0.05)
    if max(service) > 0.1:  # between two releases, a slow frame's hold moves both ends
        assert abs(steady_throughput(released, 20)[0] / rate - 1) > 0.05


def test_a_short_run_whose_frames_all_entered_early_keeps_the_release_window():
    done = [float(i) for i in range(10)]
    # every frame entered at once: no window of entries to count in
    assert steady_throughput(done, 2, 0, done, 0.5) == steady_throughput(done, 2)


def test_the_report_keeps_where_its_window_lay_but_does_not_print_it():
    """Counters read beside the run (energy) need the window's instants; the report's JSON
    gives only its length."""
    done = [10.0 + i for i in range(10)]  # released once a second from t=10
    r = stream_report(done, [0.5] * 10, 2, {}, 9.0, True, {})
    assert r.window_at == (12.0, 19.0) and r.notes["window_s"] == pytest.approx(7.0)
    assert "window_at" not in r.to_dict() and r.to_dict()["energy"] == {}
    assert stream_report([10.0], [0.5], 0, {}, 9.0, True, {}).window_at is None
