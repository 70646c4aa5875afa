"""The batch table t(b, k) of a GPU element (profile.gpu_batches): firing times of b frames at
k lanes, alone and beside busy CPU copies, within a time budget; a stage's; CPU batches kept
only where a frame ran faster."""
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fake_gpu
from hetflow.backends import Backend, get_backend, register_backend
from hetflow.errors import InputError
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform.spec import ProcessingElement
from hetflow.profile.lanes import (batch_key, batch_one_from_lanes, coarse_to_fine, measure_batches,
                                   measure_cpu_batches, measure_stage_batches, parse_batch_key)
from hetflow.profile.profile import Profile

CORES = sorted(os.sched_getaffinity(0))
GRAPH = random_cnn_graph(6, 2)


@pytest.fixture
def slow_gpu():
    fake_gpu.reset(slow=0.01, a=0.6)
    yield fake_gpu.gpu("gpu0", CORES[0])
    fake_gpu.reset()


def test_batch_table_times_each_batch_and_lane_count_alone_and_busy(slow_gpu):
    busy = [ProcessingElement("cpu1", "cpu", (CORES[-1],))]
    table = measure_batches(GRAPH, slow_gpu, busy, batches=(2, 4), counts=(1, 2), seconds=0.3,
                            warmup=1)
    assert {k for k in table if "," in k} == {"2,1", "2,2", "4,1", "4,2"}
    assert "skipped" not in table and set(table["seconds"]) == {"busy copies built", "batch 2",
                                                                "batch 4"}
    for key in ("2,1", "2,2", "4,1", "4,2"):
        b, k = parse_batch_key(key)
        entry = table[key]
        # a firing sleeps t(b) = 0.01 (0.6 + 0.4 b) and runs the small model on the CPU
        assert entry["alone"]["median"] >= fake_gpu.firing_seconds(b)
        assert entry["alone"]["median"] < fake_gpu.firing_seconds(b) + 0.05
        assert 0 < entry["alone_fps"] <= k * b / fake_gpu.firing_seconds(b) * 1.05
        assert entry["busy"]["n"] > 0 and entry["busy_fps"] > 0
        assert "memory_bytes" not in entry  # no device that reports it
    # a batch of 4 pays the fixed part once: more frames a second than a batch of 2 (1.27x
    # by the sleeps alone; the small model's CPU runs beside them, slower under load, take
    # some of it)
    assert table["4,1"]["alone_fps"] > 1.1 * table["2,1"]["alone_fps"]


def test_budget_leaves_out_the_batches_it_cannot_hold(slow_gpu):
    table = measure_batches(GRAPH, slow_gpu, batches=(2, 4, 8), counts=(1,), seconds=0.1,
                            warmup=1, budget_s=0.01)
    # the largest batch is always timed: a time limit drops the ones between it and batch 1
    assert {k for k in table if "," in k} == {"8,1"}
    assert set(table["skipped"]) == {"2", "4"}
    assert "0.0 s would be passed" in table["skipped"]["4"]


@given(st.sets(st.integers(1, 512), max_size=12))
def test_coarse_to_fine_orders_every_batch_once_largest_first(batches):
    """Each batch once; the largest first; after it, each batch is the one nearest the middle
    (by index, from batch 1's place below the smallest) of a gap left by those before it, so
    no batch comes before one that halves the gap it falls in."""
    order = coarse_to_fine(batches)
    assert sorted(order) == sorted(batches)
    if batches:
        assert order[0] == max(batches)
    assert coarse_to_fine((2, 4, 8, 16, 32)) == [32, 8, 4, 16, 2]
    vs = sorted(batches)
    for n, b in enumerate(order[1:], start=1):  # b is the middle of the gap it falls in
        i = vs.index(b)
        placed = [-1] + sorted(vs.index(x) for x in order[:n])
        lo = max(p for p in placed if p < i)
        hi = min(p for p in placed if p > i)
        assert i == (lo + hi + 1) // 2


def test_a_backend_without_batches_gets_no_batch_entries():
    class Plain(Backend):
        name, kinds = "plain-gpu-test", ("gpu",)

        def prepare(self, subnet, element, **opts):  # ignores batch
            cpu = ProcessingElement(element.name, "cpu", element.cores)
            return get_backend("cpu").prepare(subnet, cpu)

    try:
        register_backend(Plain.name, Plain)
    except ValueError:
        pass
    gpu = ProcessingElement("gpu9", "gpu", (CORES[0],), device_index=0, backend=Plain.name)
    table = measure_batches(GRAPH, gpu, batches=(2, 4), counts=(1,), seconds=0.1)
    assert {k for k in table if "," in k} == set()
    assert "do not run batches" in table["skipped"]["2"] and set(table["skipped"]) == {"2", "4"}


def test_stage_batches_time_each_pair(slow_gpu):
    layers = [l.name for l in GRAPH.layers][:2]
    table = measure_stage_batches(GRAPH, layers, slow_gpu, [(2, 1), (2, 2), (4, 1)],
                                  seconds=0.2, warmup=1)
    assert set(table) == {"2,1", "2,2", "4,1"}
    assert table["4,1"]["alone"]["median"] >= fake_gpu.firing_seconds(4)


def test_cpu_batches_are_kept_only_where_a_frame_runs_faster():
    cpu = ProcessingElement("cpu0", "cpu", (CORES[0],))
    kept, per_frame = measure_cpu_batches(GRAPH, cpu, batches=(1, 2), repeats=3, warmup=1,
                                          margin=-1.0)  # any batch "faster"
    assert set(per_frame) == {"1", "2"} and all(t > 0 for t in per_frame.values())
    assert set(kept) == {"1,1", "2,1"}
    assert kept["2,1"]["alone"]["median"] == pytest.approx(2 * per_frame["2"])
    none, _ = measure_cpu_batches(GRAPH, cpu, batches=(2,), repeats=3, warmup=1, margin=1.0)
    assert none == {}


def test_batch_one_comes_from_the_lane_table():
    lanes = {"1": {"alone": {"median": 1e-3}, "alone_fps": 1000.0, "busy": {"median": 2e-3},
                   "busy_fps": 500.0, "host": {"median": 1e-5}},
             "4": {"alone": {"median": 2e-3}, "alone_fps": 2000.0},
             "memory": {"first_lane_bytes": 100, "per_lane_bytes": 10, "free_bytes": 5,
                        "max_lanes": 9},
             "seconds": {}}
    table = batch_one_from_lanes(lanes)
    assert set(table) == {"1,1", "1,4"}
    assert table["1,1"]["busy_fps"] == 500.0 and "busy" not in table["1,4"]
    assert (table["1,1"]["memory_bytes"], table["1,4"]["memory_bytes"]) == (100, 130)


@settings(max_examples=30, deadline=None)
@given(b=st.integers(1, 64), k=st.integers(1, 64))
def test_batch_keys_round_trip(b, k):
    assert parse_batch_key(batch_key(b, k)) == (b, k)


def _profile_dict(**extra) -> dict:
    d = Profile(model_name="m", model_hash="h", platform_name="p", platform_hash="q").to_dict()
    d.update(extra)
    return d


def test_profiles_without_batches_load_and_tables_round_trip(tmp_path):
    old = _profile_dict()
    old.pop("gpu_batches")
    assert Profile.from_dict(old).gpu_batches == {}
    table = {"8,4": {"alone": {"median": 0.004, "n": 10}, "alone_fps": 8000.0,
                     "busy": {"median": 0.005}, "busy_fps": 6400.0, "memory_bytes": 1 << 30},
             "skipped": {"16": "why"}, "seconds": {"batch 8": 1.0}}
    prof = Profile.from_dict(_profile_dict(gpu_batches={"gpu0": table}))
    again = Profile.load(prof.save(tmp_path / "p.json"))
    assert again.gpu_batches == {"gpu0": table}


@pytest.mark.parametrize("bad, says", [({"8x4": {"alone": {"median": 1.0}}}, "'8x4' is not"),
                                       ({"8,4": {"alone_fps": 1.0}}, "alone"),
                                       ({"0,4": {"alone": {"median": 1.0}}}, "'0,4' is not")])
def test_a_bad_batch_table_is_refused(bad, says, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_profile_dict(gpu_batches={"gpu0": bad})))
    with pytest.raises(InputError, match=says):
        Profile.load(path)


def test_profile_model_adds_the_batch_table_beside_the_lane_table(monkeypatch, slow_gpu):
    from hetflow.platform import CpuCluster, Gpu, Platform
    from hetflow.profile.measure import profile_model

    plat = Platform("p", (CpuCluster("cpu", CORES),),
                    gpus=(Gpu(0, "fake", CORES[0], backend=fake_gpu.NAME),))
    monkeypatch.setattr("hetflow.platform.detect.check_devices_present", lambda p: None)
    prof = profile_model(GRAPH, plat, elements=["gpu0"], comm=False, repeats=2, warmup=1,
                         progress=False, contention=False, lane_seconds=0.1,
                         batch_budget_s=0.5)
    table = prof.gpu_batches["gpu0"]
    lanes = prof.gpu_lanes["gpu0"]
    # batch 1 is the lane table's; the largest always timed; the rest as the budget allows
    assert {parse_batch_key(k) for k in table if k.startswith("1,")} == {
        (1, int(k)) for k in lanes if k.isdigit()}
    assert table["1,2"]["alone_fps"] == lanes["2"]["alone_fps"]
    assert {"32,1", "32,8"} <= set(table) and "2" in table["skipped"]
    assert Profile.from_dict(prof.to_dict()).gpu_batches == prof.gpu_batches
