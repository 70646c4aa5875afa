"""InFlight: one thread keeps up to k runs in flight and gets them back in launch order, each
with its own outputs; runners without launch hooks run at submit."""
import concurrent.futures

from hypothesis import given, settings, strategies as st

from hetflow.backends.inflight import InFlight


class Launching:
    """A runner whose runs complete in the background, in any order (a thread pool)."""
    pool = concurrent.futures.ThreadPoolExecutor(4)

    def __init__(self, log):
        self.log, self.job = log, None

    def run(self, feeds):
        return {"y": feeds["x"] * 2}

    def submit(self, feeds):
        assert self.job is None, "two runs in flight on one lane"
        self.log.append(("launch", feeds["x"]))
        self.job = self.pool.submit(self.run, feeds)

    def wait(self):
        self.job.result()

    def collect(self):
        job, self.job = self.job, None
        return job.result()


class Blocking:
    def __init__(self, log):
        self.log = log

    def run(self, feeds):
        self.log.append(("run", feeds["x"]))
        return {"y": feeds["x"] * 2}


@settings(max_examples=60, deadline=None)
@given(k=st.integers(1, 5), launching=st.booleans(),
       ops=st.lists(st.booleans(), min_size=1, max_size=40))
def test_runs_come_back_in_launch_order_with_their_own_outputs(k, launching, ops):
    log: list = []
    runs = InFlight([(Launching if launching else Blocking)(log) for _ in range(k)])
    sent, got = 0, []
    for want_submit in ops:  # True: launch when a lane is free; False: collect when any is out
        if want_submit and runs.has_room():
            runs.submit({"x": sent}, sent)
            sent += 1
        elif len(runs):
            if want_submit is False and sent % 2:
                runs.wait()
            got.append(runs.collect())
        assert len(runs) <= k and len(runs) == sent - len(got)
    while len(runs):
        got.append(runs.collect())
    assert [tag for tag, _ in got] == list(range(sent))
    assert all(out["y"] == 2 * tag for tag, out in got)
    assert [x for _, x in log] == list(range(sent))  # launched (or run) in submission order
