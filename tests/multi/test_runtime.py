"""End to end on two tiny random models on this machine's cores: search, multi-plan, run."""
import os

import pytest

from hetflow.plan.mapping import Mapping
from hetflow.multi.multiplan import MultiPlan, make_multiplan
from hetflow.multi.problem import MultiProblem
from hetflow.multi.run import run_multiplan
from hetflow.multi.search import MultiSearchResult, evaluate_joint, search_multi
from hetflow.platform.spec import ProcessingElement

from multi_helpers import app_problem


def cpu_elements():
    cores = sorted(os.sched_getaffinity(0))
    cores = (cores * 2)[:2]  # two elements even on one core (then they share it)
    return [ProcessingElement(f"cpu{c}" if i == 0 or c != cores[0] else f"cpu{c}b", "cpu", (c,),
                              cluster="cpu", power_w=2.0) for i, c in enumerate(cores)]


def tiny_problem(period_a=0.1, period_b=0.12) -> MultiProblem:
    els = cpu_elements()
    return MultiProblem([app_problem(6, 11, period_a, 1, els, "a", layer_ms=0.05),
                         app_problem(9, 12, period_b, 2, els, "b", layer_ms=0.05)])


def plan_of(mp: MultiProblem, mappings: list[Mapping]) -> MultiPlan:
    """A multi-plan of given mappings (no search)."""
    cand = evaluate_joint(mp, mappings)
    return make_multiplan(mp, MultiSearchResult(cand, [cand], cand, 1, 0.0, []))


def split(app, first: str, second: str) -> Mapping:
    layers = [l.name for l in app.graph.layers]
    half = len(layers) // 2
    return Mapping({l: first if i < half else second for i, l in enumerate(layers)})


def graphs(mp):
    return {a.name: a.graph for a in mp.apps}


def test_generous_periods_meet_every_deadline_and_outputs_match(tmp_path):
    mp = tiny_problem(0.15, 0.2)  # sub-millisecond models: generous even on a loaded machine
    res = search_multi(mp, pop_size=8, generations=2)
    plan = MultiPlan.load(make_multiplan(mp, res).save(tmp_path / "m.json"))
    report = run_multiplan(plan, graphs(mp), frames=5, warmup=1, check="first",
                           engine="threads")
    assert report.complete and report.wall_s > 0
    for r in report.apps:
        assert r.frames >= 5  # the faster app keeps running until the slower one is done
        assert r.notes["missed"] == 0
        assert r.latency["max"] <= r.notes["period_s"]
        assert r.checked_frames == 4 and r.max_abs_error < 1e-3
        assert r.predicted["response_worst"] == pytest.approx(
            res.chosen.analysis[r.name].response_worst)
    assert set(report.utilisation) <= {e.name for e in cpu_elements()}


def test_apps_sharing_both_elements_in_opposite_orders(tmp_path):
    mp = tiny_problem(0.08, 0.1)
    e0, e1 = (e.name for e in cpu_elements())
    plan = plan_of(mp, [split(mp.apps[0], e0, e1), split(mp.apps[1], e1, e0)])
    assert set(plan.shared_elements) == {e0, e1}
    report = run_multiplan(plan, graphs(mp), frames=5, warmup=1, trace_path=tmp_path / "t.json",
                           engine="threads")
    assert all(r.notes["missed"] == 0 and r.checked_frames == 4 for r in report.apps)
    assert (tmp_path / "t.json").exists()


def test_a_period_too_short_is_reported_as_misses_with_bounded_frames_in_flight():
    mp = tiny_problem(0.01, 0.25)
    e0, _ = (e.name for e in cpu_elements())
    plan = plan_of(mp, [Mapping({l.name: e0 for l in a.graph.layers}) for a in mp.apps])
    plan.apps[1].period = 1e-5  # far shorter than one frame: the source outruns the app
    report = run_multiplan(plan, graphs(mp), frames=30, warmup=0, check="none",
                           max_in_flight=2, engine="threads")
    b = next(r for r in report.apps if r.name == "b")
    assert b.notes["missed"] == b.frames >= 30
    assert b.notes["late_releases"] > 0 and b.notes["peak_in_flight"] <= 2


def test_bad_run_options():
    from hetflow.errors import InputError

    mp = tiny_problem()
    e0, _ = (e.name for e in cpu_elements())
    plan = plan_of(mp, [Mapping({l.name: e0 for l in a.graph.layers}) for a in mp.apps])
    with pytest.raises(InputError, match="--check"):
        run_multiplan(plan, graphs(mp), check="all")
    with pytest.raises(InputError, match="--max-in-flight"):
        run_multiplan(plan, graphs(mp), max_in_flight=0)
    with pytest.raises(InputError, match="--switch-interval 1.0"):
        run_multiplan(plan, graphs(mp), switch_interval=1.0)
    from dataclasses import replace

    for app in plan.apps:  # a multi-plan made for a bigger machine
        app.plan.elements[e0] = replace(app.plan.elements[e0], cores=(4095,))
    with pytest.raises(InputError, match=rf"application a: element {e0} uses core 4095"):
        run_multiplan(plan, graphs(mp))


def test_the_run_shortens_the_gil_switch_interval_and_restores_it(monkeypatch):
    import sys

    import hetflow.multi.runtime as runtime

    seen = []
    drive = runtime.drive_shared

    def spy(*a, **k):
        seen.append(sys.getswitchinterval())
        return drive(*a, **k)

    monkeypatch.setattr(runtime, "drive_shared", spy)
    before = sys.getswitchinterval()
    mp = tiny_problem(0.15, 0.2)
    e0, _ = (e.name for e in cpu_elements())
    plan = plan_of(mp, [Mapping({l.name: e0 for l in a.graph.layers}) for a in mp.apps])
    run_multiplan(plan, graphs(mp), frames=2, warmup=0, check="none", switch_interval=2e-4,
                  engine="threads")
    assert seen == [pytest.approx(2e-4)] and sys.getswitchinterval() == before


def test_period_zero_runs_free_with_at_most_max_in_flight_frames():
    """Period 0: no deadline, a frame whenever the element holds fewer than max_in_flight (and
    the collector is not further behind); both split applications finish, the lower priority
    one on the time the other leaves, and their outputs equal the reference."""
    mp = tiny_problem()
    e0, e1 = (e.name for e in cpu_elements())
    plan = plan_of(mp, [split(a, e0, e1) for a in mp.apps])
    for a in plan.apps:
        a.period = 0.0
    report = run_multiplan(plan, graphs(mp), frames=200, warmup=5, check="first",
                           max_in_flight=2, engine="threads")
    check_free_running(report, 200)


def check_free_running(report, frames: int) -> None:
    for r in report.apps:
        assert r.frames >= frames and r.notes["missed"] == 0
        assert r.notes["peak_in_flight"] == 2  # opened as soon as there is room, never more
        assert r.notes["late_releases"] == 0  # no period, so nothing is late
        assert r.checked_frames == 4 and r.max_abs_error < 1e-3


def test_misses_count_against_the_relative_deadline():
    mp = tiny_problem(0.15, 0.2)
    e0, _ = (e.name for e in cpu_elements())
    plan = plan_of(mp, [Mapping({l.name: e0 for l in a.graph.layers}) for a in mp.apps])
    plan.apps[0].deadline = 1e-7  # before any frame can be done: every response misses it
    report = run_multiplan(plan, graphs(mp), frames=4, warmup=0, check="none", engine="threads")
    a, b = report.apps
    assert a.notes["deadline_s"] == 1e-7 and a.notes["missed"] == a.frames >= 4
    assert b.notes["deadline_s"] == b.notes["period_s"] == 0.2  # none given: the period


def streams_plan(mp, streams: int):
    """Application a on one element, b on the other, a given `streams` streams."""
    e0, e1 = (e.name for e in cpu_elements())
    plan = plan_of(mp, [Mapping({l.name: e for l in a.graph.layers})
                        for a, e in zip(mp.apps, (e0, e1))])
    plan.apps[0].streams = streams
    return plan


def check_streams(report) -> None:
    """Three streams of a at its period 0.15 s: each stream's frames, responses and misses
    reported, outputs checked as for one stream, a's frames three times as often."""
    a, b = report.apps
    streams = a.notes["streams"]
    assert [s["stream"] for s in streams] == ["a/0", "a/1", "a/2"]
    assert sum(s["frames"] for s in streams) == a.frames >= 9
    assert max(s["frames"] for s in streams) - min(s["frames"] for s in streams) <= 1
    assert sum(s["missed"] for s in streams) == a.notes["missed"]
    assert all(s["max"] <= a.latency["max"] for s in streams)
    assert a.checked_frames == 4 and a.max_abs_error < 1e-3
    assert 0.7 * 3 / 0.15 < a.throughput < 1.3 * 3 / 0.15
    assert "streams" not in b.notes


def test_streams_of_one_application_are_released_in_turn_and_reported_each():
    """Three streams of application a at one period: their releases spread over the period (one
    set of sessions serves them all)."""
    mp = tiny_problem(0.15, 0.2)
    plan = streams_plan(mp, 3)
    assert plan.apps[0].release_every == pytest.approx(0.05)
    check_streams(run_multiplan(plan, graphs(mp), frames=9, warmup=1, check="first",
                                engine="threads"))
