"""The lane table of a GPU element: firing times and frames/s at each lane count, alone and
beside busy CPU copies, turned into the slowdown curves the cost model reads."""
import os
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fake_gpu
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform.spec import ProcessingElement
from hetflow.profile.lanes import measure_lanes, slowdown_curves


def test_lane_table_has_every_count_alone_and_busy_and_curves_follow():
    cores = sorted(os.sched_getaffinity(0))
    graph = random_cnn_graph(8, 3)
    gpu = fake_gpu.gpu("gpu0", cores[0])
    busy = [ProcessingElement("cpu1", "cpu", (cores[-1],))]
    fake_gpu.reset(slow=0.004)
    try:
        table = measure_lanes(graph, gpu, busy, counts=(1, 2, 4), seconds=0.3, warmup=1,
                              more=())
    finally:
        fake_gpu.reset()
    assert set(table) == {"1", "2", "4", "staging", "seconds"}  # no device memory here
    assert set(table["seconds"]) == {"lanes built", "timed alone", "busy copies built",
                                     "busy copies' first frames", "timed beside busy copies",
                                     "busy copies' last frames"}
    # 2 x 3 lane counts of 0.3 / 2 s each, alone and busy
    assert 0.85 <= table["seconds"]["timed alone"] and 0.85 <= table["seconds"][
        "timed beside busy copies"]
    # four lanes copying 8 MiB inputs on one core: some CPU time per byte, below a second a MiB
    assert table["staging"]["lanes"] == 4 and 0 < table["staging"]["per_byte"] < 1e-6
    # a full batch of the model's input frames staged by the element's one thread
    staged = table["staging"]["staged"]
    assert staged["rows"] == 32 and staged["stagers"] == 1 and 0 < staged["per_byte"] < 1e-6
    for k in ("1", "2", "4"):
        assert table[k]["alone"]["n"] > 0 and table[k]["busy"]["n"] > 0
        assert table[k]["alone_fps"] > 0 and table[k]["busy_fps"] > 0
    # sleeping lanes overlap: four of them run well over twice the frames of one
    assert table["4"]["alone_fps"] > 2 * table["1"]["alone_fps"]
    alone, busy_curve = slowdown_curves(table)
    assert alone[1] == 1.0 and set(alone) == set(busy_curve) == {1, 2, 4}
    # a firing at k lanes is k over their rate: the mean firing, stalls included
    assert alone[4] == pytest.approx(4 * table["1"]["alone_fps"] / table["4"]["alone_fps"])
    assert busy_curve[2] == pytest.approx(2 * table["1"]["alone_fps"] / table["2"]["busy_fps"])


def test_a_curve_reads_the_rate_where_a_few_firings_stalled():
    """24 lanes whose median firing is 3x one lane's but a few of whose firings waited for the
    driving core: their rate, not their median, says how much slower a firing is; a table
    without rates falls back on the medians."""
    table = {"1": {"alone": {"median": 1e-3}, "alone_fps": 1000.0},
             "24": {"alone": {"median": 3e-3}, "alone_fps": 6000.0}}
    alone, _ = slowdown_curves(table)
    assert alone == {1: 1.0, 24: pytest.approx(4.0)}  # 24 / 6000 s over 1 / 1000 s
    bare = {k: {"alone": v["alone"]} for k, v in table.items()}
    assert slowdown_curves(bare)[0] == {1: 1.0, 24: pytest.approx(3.0)}


def test_lane_counts_go_on_while_more_lanes_still_pay():
    # sleeping lanes overlap: each doubling about doubles the rate, so 4 and then 8 are timed,
    # alone and beside the busy copy; 8 is the last that `more` offers
    cores = sorted(os.sched_getaffinity(0))
    graph = random_cnn_graph(6, 5)
    fake_gpu.reset(slow=0.004)
    try:
        table = measure_lanes(graph, fake_gpu.gpu("gpu0", cores[0]),
                              [ProcessingElement("cpu1", "cpu", (cores[-1],))], counts=(1, 2),
                              seconds=0.2, warmup=1, more=(4, 8))
    finally:
        fake_gpu.reset()
    assert {k for k in table if k.isdigit()} == {"1", "2", "4", "8"}
    assert all("busy" in table[k] for k in ("1", "2", "4", "8"))
    assert table["8"]["alone_fps"] > 2 * table["2"]["alone_fps"]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from([1, 2, 4, 8, 16, 24]), st.floats(1.0, 1e4),
                       min_size=1, max_size=6), st.none() | st.integers(1, 64))
def test_next_count_only_where_the_last_doubling_paid_and_memory_holds(rates, limit):
    from hetflow.profile.lanes import MORE_COUNTS, MORE_GAIN, next_count

    got = next_count(rates, limit)
    ks = sorted(rates)
    if got is None:
        # nothing further: too few counts, none left, too little memory, or no gain
        assert (len(ks) < 2 or ks[-1] >= MORE_COUNTS[-1]
                or (limit is not None and min(c for c in MORE_COUNTS if c > ks[-1]) > limit)
                or rates[ks[-1]] < MORE_GAIN * rates[ks[-2]])
    else:
        assert got == min(c for c in MORE_COUNTS if c > ks[-1])
        assert limit is None or got <= limit
        assert rates[ks[-1]] >= MORE_GAIN * rates[ks[-2]]


def test_two_passes_time_the_counts_more_adds_on_the_way_up():
    from hetflow.profile.lanes import _two_passes

    calls = []

    def run(k, seconds):
        calls.append(k)
        return {"firing": {"median": 1e-3}, "fps": k * 1e3, "host": {}}

    got = _two_passes((1, 2), run, 1.0, lambda rates: {2: 4, 4: 8}.get(max(rates)))
    assert calls == [1, 2, 4, 8, 8, 4, 2, 1] and list(got) == [1, 2, 4, 8]


def test_two_passes_keep_each_counts_faster_run_and_go_up_then_down():
    from hetflow.profile.lanes import _two_passes

    calls = []
    slowed = {(8, 0)}  # the first run of 8 lanes is disturbed

    def run(k, seconds):
        n = sum(1 for c, _ in calls if c == k)
        calls.append((k, seconds))
        t = k * 1e-3 * (3.0 if (k, n) in slowed else 1.0)
        return {"firing": {"median": t}, "fps": k / t, "host": {}}

    got = _two_passes((1, 2, 4, 8), run, 1.0)
    assert [k for k, _ in calls] == [1, 2, 4, 8, 8, 4, 2, 1]
    assert all(sec == 0.5 for _, sec in calls)  # the same time in all
    assert {k: r["firing"]["median"] for k, r in got.items()} == {1: 1e-3, 2: 2e-3, 4: 4e-3,
                                                                   8: 8e-3}


class _Copy:
    """A runner that sleeps a frame's time, or fails on a chosen frame."""

    caller_cores = ()

    def __init__(self, frame_s: float, fail_at: int | None = None):
        self.frame_s, self.fail_at, self.runs = frame_s, fail_at, 0

    def run(self, feeds):
        self.runs += 1
        if self.runs == self.fail_at:
            raise ValueError("copy broke")
        time.sleep(self.frame_s)


def test_busy_copies_run_through_the_block_and_start_warm():
    from hetflow.profile.lanes import running_beside

    copies = [_Copy(0.01) for _ in range(3)]
    with running_beside(copies, {}) as finished:
        assert all(c.runs >= 1 for c in copies)  # each ran its warm frame before the block
        n0 = finished()
        time.sleep(0.2)
        n1 = finished()
    # three copies at 10 ms a frame keep running through the block: well over a frame each
    assert n1 - n0 >= 3 * 5
    ended = [c.runs for c in copies]
    time.sleep(0.05)
    assert [c.runs for c in copies] == ended  # stopped when the block ended


def test_a_busy_copy_that_fails_is_named_when_the_block_ends():
    from hetflow.errors import RuntimeFault
    from hetflow.profile.lanes import running_beside

    with pytest.raises(RuntimeFault, match="busy copy 1: ValueError: copy broke"):
        with running_beside([_Copy(0.001), _Copy(0.001, fail_at=3)], {}):
            time.sleep(0.1)
    with pytest.raises(RuntimeFault, match="busy copy 0: ValueError"):  # in its warm frame
        with running_beside([_Copy(0.001, fail_at=1)], {}):
            pytest.fail("the block must not start when a copy failed its first frame")


def test_the_lane_tables_lanes_stay_in_the_scope_for_the_runs_after_it():
    """Inside a reuse scope (a bench) the lane table's lanes are one pool: the baselines and
    plans that run the whole model on the GPU take them instead of converting it again."""
    from hetflow.backends.reuse import release, reusing_runners, runners_for

    cores = sorted(os.sched_getaffinity(0))
    graph = random_cnn_graph(6, 2)
    gpu = fake_gpu.gpu("gpu0", cores[0])
    with reusing_runners() as scope:
        # no counts past these (sleeping fake lanes scale, so the table would go on to 16 when
        # this machine is quiet, and stop at 4 when it is not)
        measure_lanes(graph, gpu, (), counts=(1, 2, 4), seconds=0.1, warmup=1, more=())
        built = scope.built
        assert built == 4  # one lane, then three more
        lanes = runners_for(graph, [l.name for l in graph.layers], gpu, 4)
        assert scope.built == built and len(lanes) == 4
        release(lanes)


@given(st.lists(st.floats(1e-11, 1e-9), min_size=1, max_size=5), st.floats(1e-11, 1e-9))
def test_the_precisions_of_one_gpu_share_the_median_staging_cost(costs, other):
    """The precision variants of one GPU on the same driving cores get one staging cost, the
    median of what each measured; a GPU of another device keeps its own."""
    from hetflow.profile.measure import _share_staging
    from hetflow.profile.profile import Profile

    variants = [ProcessingElement(f"gpu0@v{i}", "gpu", (3, 2), device_index=0)
                for i in range(len(costs))]
    apart = ProcessingElement("gpu1", "gpu", (5,), device_index=1)
    prof = Profile("m", "h", "p", "ph")
    for e, c in zip(variants + [apart], costs + [other]):
        prof.gpu_lanes[e.name] = {"staging": {"per_byte": c, "lanes": 8, "nbytes": 1}}
    _share_staging(prof, variants + [apart])
    got = {prof.gpu_lanes[e.name]["staging"]["per_byte"] for e in variants}
    assert got == {float(np.median(costs))}
    assert prof.gpu_lanes["gpu1"]["staging"]["per_byte"] == other
