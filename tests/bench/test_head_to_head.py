import os
import statistics

import pytest
from hypothesis import given, settings, strategies as st

from hetflow.bench.core import BenchSettings
from hetflow.bench.rows import balanced_pair_kept, head_to_head_line
from hetflow.bench.head_to_head import head_to_head
from hetflow.runtime.report import RunReport

from test_core import QUICK, bench_small
from patching import patch_everywhere


class _Plan:
    def __init__(self, predicted):
        self.predicted = {"throughput": predicted, "latency": 1e-3}


def test_the_sides_alternate_and_the_ratio_is_of_the_medians(monkeypatch):
    """Copies then plan, plan then copies, ...: drift and the order within a round fall on both
    sides alike; each side's median."""
    calls = []
    copies = iter([100.0, 300.0, 200.0])
    plans = iter([150.0, 90.0, 210.0])
    copies_p99 = iter([0.040, 0.020, 0.030])
    plans_p99 = iter([0.010, 0.050, 0.012])

    def measure_parallel(graph, parallel, source, warmup, seconds, lanes, batch):
        assert batch == {"gpu0": 8}  # the copies run the parallel baseline's design
        calls.append(("copies", seconds))
        fps = next(copies)
        return RunReport("copies", 10, 0, fps, {"p50": 0.0, "p99": next(copies_p99)},
                         notes={"per_element_fps": {"gpu0": fps * 0.9, "cpu0": fps * 0.1}})

    def run_plan(plan, graph, frames, warmup, check="first", **_):
        calls.append(("plan", frames))
        fps = next(plans)
        # the plan's first run has no CPU frames: absent there, it counts 0 in the median
        split = {"gpu0": fps} if len(calls) == 2 else {"gpu0": fps * 0.8, "cpu0": fps * 0.2}
        return RunReport("plan", frames, warmup, fps, {"p50": 0.0, "p99": next(plans_p99)},
                         notes={"per_element_fps": split})

    patch_everywhere(monkeypatch, "hetflow.runtime.baselines.measure_parallel", measure_parallel)
    patch_everywhere(monkeypatch, "hetflow.runtime.api.run_plan", run_plan)
    said = []
    h = head_to_head(_Plan(1000.0), None, [], {}, None, repeats=3, seconds=0.5, at_least=50,
                     log=said.append, batch={"gpu0": 8})
    assert [c[0] for c in calls] == ["copies", "plan", "plan", "copies", "copies", "plan"]
    assert [c[1] for c in calls if c[0] == "plan"] == [500] * 3  # the predicted rate x seconds
    assert h["plan_runs"] == [150.0, 90.0, 210.0] and h["copies_runs"] == [100.0, 300.0, 200.0]
    assert h["ratio"] == pytest.approx(150.0 / 200.0) and len(said) == 3
    assert "the plan, then the parallel copies" in said[1]
    assert h["round_ratios"] == pytest.approx([1.5, 0.3, 1.05])
    assert "0.750x (medians; rounds 0.300-1.500)" in head_to_head_line({"plan": "single", **h})
    # each side's p99: the median of its runs, not a pairing of the rounds
    assert h["plan_p99"] == pytest.approx(0.012) and h["copies_p99"] == pytest.approx(0.030)
    assert h["p99_ratio"] == pytest.approx(0.4)
    assert h["round_p99_ratios"] == pytest.approx([0.25, 2.5, 0.4])
    # where each side's frames came from: each element's median over the rounds
    assert h["copies_per_element_fps"] == pytest.approx({"gpu0": 180.0, "cpu0": 20.0})
    assert h["plan_per_element_fps"] == pytest.approx({"gpu0": 150.0, "cpu0": 18.0})
    # a plan without a prediction runs as long at the copies' rate just measured
    calls.clear()
    copies, plans = iter([400.0, 100.0]), iter([1.0, 1.0])
    copies_p99, plans_p99 = iter([0.1, 0.1]), iter([0.1, 0.1])
    head_to_head(_Plan(0.0), None, [], {}, None, repeats=2, seconds=0.5, at_least=50,
                 batch={"gpu0": 8})
    assert calls == [("copies", 0.5), ("plan", 200), ("copies", 0.5), ("plan", 50)]


@pytest.mark.parametrize("ratio, p99_ratio, kept", [
    (0.95, 0.45, True), (0.9, 0.5, True), (0.89, 0.3, False), (1.2, 0.51, False)])
def test_the_balanced_pair_is_judged_by_the_medians(ratio, p99_ratio, kept):
    h = {"plan": "balanced", "repeats": 8, "plan_fps": 90.0 * ratio, "copies_fps": 90.0,
         "ratio": ratio, "round_ratios": [ratio], "plan_p99": 0.01 * p99_ratio,
         "copies_p99": 0.01, "p99_ratio": p99_ratio, "rate_floor": 0.9, "latency_cap": 0.5}
    assert balanced_pair_kept(h) is kept
    assert head_to_head_line(h).endswith("both kept" if kept else "not kept")
    # without a p99 the cap cannot be said to be kept
    assert not balanced_pair_kept({**h, "p99_ratio": None})


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_a_bench_runs_its_best_plan_head_to_head(tmp_path, monkeypatch):
    mb = bench_small(tmp_path, monkeypatch, 6, 3, BenchSettings(**QUICK, head_to_head=2))
    h = mb.notes["head_to_head"]
    plans = {r["name"].removeprefix("hetflow "): r["throughput"] for r in mb.rows
             if r["kind"] == "plan" and not r.get("infeasible")}
    # the best of the throughput plans (the balanced one is chosen for its latency)
    throughput = {k: v for k, v in plans.items() if k != "balanced"}
    assert h["plan"] != "balanced" and plans[h["plan"]] == max(throughput.values())
    assert h["repeats"] == 2 and len(h["plan_runs"]) == len(h["copies_runs"]) == 2
    assert all(x > 0 for x in h["plan_runs"] + h["copies_runs"])
    assert h["ratio"] == pytest.approx(statistics.median(h["plan_runs"])
                                       / statistics.median(h["copies_runs"]))
    assert h["copies_p99"] > 0 and h["p99_ratio"] == pytest.approx(
        statistics.median(h["plan_p99_runs"]) / statistics.median(h["copies_p99_runs"]))
    # the balanced plan's pair, side by side the same way (or its design's head to head)
    b = mb.notes["head_to_head_balanced"]
    assert b["plan"] == "balanced" and b["latency_cap"] == 0.5 and b["rate_floor"] == 0.9
    same = plans_by_design(mb)["balanced"] == plans_by_design(mb)[h["plan"]]
    assert (b.get("run_of") == h["plan"]) is same
    assert len(b["plan_p99_runs"]) == len(b["copies_p99_runs"]) == 2
    # off by default
    assert BenchSettings().head_to_head == 0


def plans_by_design(mb) -> dict[str, str]:
    return {r["name"].removeprefix("hetflow "): r["design"] for r in mb.rows
            if r["kind"] == "plan" and not r.get("infeasible")}


def _row(name, fps, design, pilot, run_of=None):
    pilots = [{"design": "other", "pilot_throughput": 1.0}]
    if pilot is not None:
        pilots.append({"design": design, "pilot_throughput": pilot, "chosen": True})
    return {"name": f"hetflow {name}", "throughput": fps, "design": design, "pilots": pilots,
            **({"run_of": run_of} if run_of else {})}


@pytest.mark.parametrize("balanced_pilot, balanced_design, run_of, chosen", [
    (9300.0, "cpu0-4|cpu5-9|cpu10-14|gpu0 x24", None, "hetflow balanced"),  # 1.06x its pilot
    (9100.0, "cpu0-4|cpu5-9|cpu10-14|gpu0 x24", None, "hetflow single"),  # 1.04x: noise
    (9900.0, "copies", "single", "hetflow single"),  # one mapping, one run: nothing to choose
    (9900.0, "copies", None, "hetflow balanced"),  # one design string, other cuts: its own run
    (None, "cpu0-4|cpu5-9|cpu10-14|gpu0 x24", None, "hetflow single"),  # no pilot: no choice
])
def test_the_balanced_plan_runs_as_the_best_only_if_it_piloted_past_the_margin(
        balanced_pilot, balanced_design, run_of, chosen):
    """The bench's one sample never decides (the balanced plan's 9,500 here would): its pilot
    against the best throughput plan's pilot, by more than the pilots' noise. Plans compare by
    run (mapping), not by design string, which names no cut points."""
    from hetflow.bench.rows import best_throughput_row

    rows = [_row("single", 8700.0, "copies", 8750.0), _row("pipeline", 8600.0, "gpu0 x24", 8700.0),
            _row("balanced", 9500.0, balanced_design, balanced_pilot, run_of)]
    said = []
    assert best_throughput_row(rows, said.append)["name"] == chosen
    assert bool(said) == (chosen == "hetflow balanced")


def _coverage(n: int, k: int) -> float:
    """Oracle: the chance that [x(k), x(n-k+1)] holds the median, by counting every pattern of
    samples below or above it (each side with chance 1/2)."""
    import itertools

    hit = sum(1 for signs in itertools.product((0, 1), repeat=n)
              if sum(signs) >= k and n - sum(signs) >= k)
    return hit / 2 ** n


@settings(max_examples=60, deadline=None)
@given(xs=st.lists(st.floats(0.5, 1.5, allow_nan=False), min_size=1, max_size=12),
       level=st.sampled_from([0.8, 0.9, 0.95]))
def test_the_rounds_median_interval_covers_as_it_says(xs, level):
    from hetflow.bench.head_to_head import median_interval

    got = median_interval(xs, level)
    n, ordered = len(xs), sorted(xs)
    if got is None:  # not even the widest interval reaches the level
        assert _coverage(n, 1) < level
        return
    lo, hi, confidence = got
    k = ordered.index(lo) + 1 if ordered.count(lo) == 1 else None
    assert lo <= statistics.median(xs) <= hi
    assert confidence == pytest.approx(next(_coverage(n, j) for j in range(n // 2, 0, -1)
                                            if _coverage(n, j) >= level))
    assert confidence >= level
    if k is not None:  # the narrowest interval at the level: one step in falls short
        assert k == n // 2 or _coverage(n, k + 1) < level
