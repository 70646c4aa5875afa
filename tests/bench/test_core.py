import os

import onnx
import pytest

from hetflow.bench import core
from hetflow.bench.core import BenchSettings, _choose_by_pilot, bench_model, frames_for
from hetflow.mapping.mapping import Mapping
from hetflow.runtime.report import RunReport


class _Plan:
    def __init__(self, name, predicted):
        self.mapping = Mapping({"l0": name})
        self.app = type("App", (), {"phases": {name: []}})()
        self.strategy = "single"
        self.predicted = {"throughput": predicted, "latency": 1e-3}


def _fake_runs(monkeypatch, measured):
    """run_plan replaced: each plan 'measures' (fps, p99) from `measured`; calls counted."""
    calls = []

    def run_plan(plan, graph, frames, warmup, check="first", **_):
        name = next(iter(plan.app.phases))
        calls.append((name, frames))
        fps, p99 = measured[name]
        return RunReport("plan", frames, warmup, fps, {"p50": p99 / 2, "p99": p99})

    monkeypatch.setattr("hetflow.runtime.api.run_plan", run_plan)
    return calls


def test_the_measured_best_wins_not_the_predicted_best(monkeypatch):
    calls = _fake_runs(monkeypatch, {"a": (900.0, 0.02), "b": (1100.0, 0.05), "c": (1000.0, 0.01)})
    cands = [(_Plan(n, p), None) for n, p in (("a", 2000.0), ("b", 1500.0), ("c", 1200.0))]
    plan, _, tried = _choose_by_pilot(cands, None, BenchSettings(), None, {}, lambda s: None)
    assert next(iter(plan.app.phases)) == "b"
    assert [t.get("chosen", False) for t in tried] == [False, True, False]
    assert [t["pilot_throughput"] for t in tried] == [900.0, 1100.0, 1000.0]
    # about pilot_seconds at the predicted rate, at least 60 frames
    assert [f for _, f in calls] == [800, 600, 480]


def test_a_latency_cap_is_kept_on_the_measured_p99(monkeypatch):
    _fake_runs(monkeypatch, {"a": (900.0, 0.02), "b": (1100.0, 0.05), "c": (1000.0, 0.01)})
    cands = [(_Plan(n, 1000.0), None) for n in "abc"]
    plan, _, _ = _choose_by_pilot(cands, None, BenchSettings(), 0.03, {}, lambda s: None)
    assert next(iter(plan.app.phases)) == "c"
    # no candidate keeps the cap: the one closest to it
    plan, _, _ = _choose_by_pilot(cands, None, BenchSettings(), 0.001, {}, lambda s: None)
    assert next(iter(plan.app.phases)) == "c"


def test_each_mapping_is_piloted_once_per_model(monkeypatch):
    calls = _fake_runs(monkeypatch, {"a": (900.0, 0.02), "b": (1100.0, 0.05)})
    pilots = {}
    for _ in range(2):
        _choose_by_pilot([(_Plan("a", 1.0), None), (_Plan("b", 1.0), None)], None,
                         BenchSettings(), None, pilots, lambda s: None)
    assert sorted(n for n, _ in calls) == ["a", "b"]
    # one candidate: nothing to choose, nothing run
    plan, _, tried = _choose_by_pilot([(_Plan("z", 1.0), None)], None, BenchSettings(), None,
                                      pilots, lambda s: None)
    assert tried == [] and len(calls) == 2


def test_frames_for_a_run_follow_the_predicted_rate():
    assert frames_for(_Plan("a", 3000.0), 1.0, 120) == 3000
    assert frames_for(_Plan("a", 50.0), 1.0, 120) == 120
    assert frames_for(_Plan("a", float("nan")), 1.0, 120) == 120
    assert frames_for(_Plan("a", 1e9), 1.0, 120) == 20000


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_bench_of_a_small_model_end_to_end(tmp_path, monkeypatch):
    """Profile, search, pilot, run and check a random CNN on two cores: every plan row is a
    real measured run whose first frames matched the reference."""
    from hetflow.model.synthetic import random_cnn_model
    from hetflow.platform import CpuCluster, Platform

    monkeypatch.setenv("HETFLOW_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "small.onnx"
    onnx.save(random_cnn_model(12, 5), model)
    cores = tuple(sorted(os.sched_getaffinity(0)))[:2]
    plat = Platform("two", (CpuCluster("cpu", cores),))
    settings = BenchSettings(frames=40, warmup=5, plan_seconds=0.2, pilot_seconds=0.1,
                             baseline_seconds=0.3, profile_repeats=3)
    mb = bench_model(str(model), plat, settings, report_dir=tmp_path / "rep")
    rows = {r["name"]: r for r in mb.rows}
    assert {"parallel copies", "hetflow pipeline", "hetflow single"} <= set(rows)
    for name in ("hetflow pipeline", "hetflow single"):
        r = rows[name]
        assert r["throughput"] > 0 and r["checked_frames"] == 8 and r["max_abs_error"] < 1e-3
        assert r["predicted_throughput"] > 0 and r["vs_parallel"] > 0
        if r["pilots"]:  # several candidates: exactly one chosen, and it is the run's plan
            chosen = [p for p in r["pilots"] if p.get("chosen")]
            assert len(chosen) == 1 and chosen[0]["stages"] == r["stages"]
    assert (tmp_path / "rep" / f"{mb.model}.single.plan.json").exists()
    basis = mb.notes["prediction_basis"]
    assert set(basis["plan_stage_s"]) >= {"pipeline", "single"}


def _problem():
    import numpy as np

    from hetflow.mapping.problem import Problem
    from hetflow.model.synthetic import random_cnn_graph
    from hetflow.platform.spec import ProcessingElement

    graph = random_cnn_graph(8, 1)
    els = [ProcessingElement(f"cpu{i}", "cpu", (i,)) for i in range(3)]
    els.append(ProcessingElement("gpu0", "gpu", (3,), model="g"))
    rng = np.random.default_rng(0)
    times = rng.uniform(1e-3, 4e-3, (len(graph.layers), 1)) * np.array([[1, 1, 1, 0.1]])
    return Problem(graph, els, times, lambda nbytes, a, b: 0.0 if a == b else 1e-4)


def test_candidates_are_the_best_predicted_and_every_strategy_pick():
    from hetflow.bench.core import _search

    problem = _problem()
    s = BenchSettings(strategies=["single", "pipeline"], pilot_candidates=2)
    cands = _search(problem, "p", s, None, {}, lambda m: None)
    preds = [p.predicted["throughput"] for p, _ in cands]
    keys = [p.mapping.key() for p, _ in cands]
    assert len(set(keys)) == len(keys) and 2 <= len(cands) <= 4
    assert preds[:2] == sorted(preds[:2], reverse=True)
    picks = []
    for strategy in s.strategies:  # each strategy's own pick is among them
        own = _search(problem, "p", BenchSettings(strategies=[strategy], pilot_candidates=1),
                      None, {}, lambda m: None)
        assert len(own) == 1 and own[0][0].mapping.key() in keys
        picks.append(own[0][0].predicted["throughput"])
    # one candidate: the best prediction over all strategies, as without pilots
    best = _search(problem, "p", BenchSettings(strategies=["single", "pipeline"],
                                               pilot_candidates=1), None, {}, lambda m: None)
    assert len(best) == 1 and best[0][0].predicted["throughput"] == max(picks)
    # a latency cap holds for every candidate
    cap = sorted(p.predicted["latency"] for p, _ in cands)[0] * 1.01
    for plan, _ in _search(problem, "p", s, None, {"latency_cap": cap}, lambda m: None):
        assert plan.predicted["latency"] <= cap


def test_a_design_that_fails_its_pilot_is_listed_and_the_others_compete(monkeypatch):
    from hetflow.errors import RuntimeFault

    measured = {"a": (900.0, 0.02), "c": (1000.0, 0.01)}

    def run_plan(plan, graph, frames, warmup, check="first", **_):
        name = next(iter(plan.app.phases))
        if name not in measured:
            raise RuntimeFault(f"element {name}: died")
        fps, p99 = measured[name]
        return RunReport("plan", frames, warmup, fps, {"p50": p99 / 2, "p99": p99})

    monkeypatch.setattr("hetflow.runtime.api.run_plan", run_plan)
    cands = [(_Plan(n, 1000.0), None) for n in "abc"]
    plan, _, tried = _choose_by_pilot(cands, None, BenchSettings(), None, {}, lambda s: None)
    assert next(iter(plan.app.phases)) == "c"
    assert tried[1]["pilot_error"] == "element b: died" and "pilot_throughput" not in tried[1]
    with pytest.raises(RuntimeFault, match="element b: died"):
        _choose_by_pilot([(_Plan("b", 1.0), None), (_Plan("z", 1.0), None)], None,
                         BenchSettings(), None, {}, lambda s: None)
