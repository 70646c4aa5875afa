"""Streams of one model, deadlines apart from periods and GPU lanes: the analysis by hand, the
analysis against an independent simulation, the search writing lanes, and the most streams
admitted."""
import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetflow.errors import InfeasibleError, InputError
from hetflow.multi.multiplan import MultiPlan, make_multiplan
from hetflow.multi.problem import MultiProblem, lane_factor, schedule_of
from hetflow.multi.schedulability import (AppSchedule, Task, analyse, default_limit, frame_bounds, response_bound,
                                          utilisation)
from hetflow.multi.search import evaluate_joint, search_multi
from hetflow.multi.streams import largest_admitted, random_stream_set, with_streams
from hetflow.plan.mapping import Mapping
from hetflow.plan.plan import Plan

from lane_simulate import simulate_streams
from multi_helpers import app_problem, chain, elements, with_batches, with_lanes


def one_task(name, period, priority, c, element="gpu", streams=1, deadline=None):
    a = chain(name, period, priority, [(element, c)])
    a.streams, a.deadline = streams, deadline
    return a


# ---------------------------------------------------------------- the bound by hand


def test_streams_released_together_queue_on_one_lane():
    # 4 streams of 1 every 10 on one lane: the last of 4 released together ends at 4
    cams = one_task("cam", 10.0, 1, 1.0, streams=4)
    assert response_bound(cams, [cams]) == pytest.approx(4.0)
    assert analyse([cams])["cam"].schedulable


def test_two_lanes_share_the_other_streams_firings():
    # on 2 lanes: the 3 other streams' firings (3) shared by 2 lanes, then its own: 1.5 + 1;
    # the simulation's worst (two pairs) is 2
    cams = one_task("cam", 10.0, 1, 1.0, streams=4)
    assert response_bound(cams, [cams], lanes={"gpu": 2}) == pytest.approx(2.5)
    out = simulate_streams([cams], {"gpu": 2}, {}, 50.0)
    assert out.worst["cam"] == pytest.approx(2.0)


def test_a_deadline_past_the_period_counts_the_streams_own_frames():
    # one stream of 3 every 2 on one lane cannot keep up (1.5 frames a period): the frames
    # pile up and the bound stops at the limit; with 2 lanes it keeps up
    late = one_task("late", 2.0, 1, 3.0, deadline=8.0)
    assert late.overlaps
    assert response_bound(late, [late]) > 8.0
    assert not analyse([late])["late"].schedulable
    two = analyse([late], {"gpu": 2})["late"]
    assert two.schedulable and two.response_worst <= 8.0
    out = simulate_streams([late], {"gpu": 2}, {}, 100.0)
    assert out.worst["late"] <= two.response_worst + 1e-9 and out.missed["late"] == 0


def test_a_deadline_shorter_than_the_period_is_what_is_checked():
    hp = one_task("hp", 10.0, 1, 4.0)
    lo = one_task("lo", 20.0, 2, 1.0, deadline=4.0)  # waits 4 for hp: 5 > 4
    res = analyse([hp, lo])
    assert res["lo"].response_worst == pytest.approx(5.0)
    assert not res["lo"].schedulable and res["lo"].missed_by == pytest.approx(1.0)
    assert analyse([hp, one_task("lo", 20.0, 2, 1.0, deadline=5.0)])["lo"].schedulable


def test_the_bottleneck_of_a_miss_by_the_bound_is_where_the_frame_waits():
    # 6 streams of 1 on 6 CPU lanes then 1 on one GPU lane, every 10, due in 5: Eq. 11 sees
    # no other application, the bound sees the other 5 streams queue on the GPU
    cams = chain("cam", 10.0, 1, [("cpu", 1.0), ("gpu", 1.0)])
    cams.streams, cams.deadline = 6, 5.0
    res = analyse([cams], {"cpu": 6})["cam"]
    assert res.eq11_ok and not res.schedulable
    assert res.bottleneck == "gpu"


def test_batches_of_streams_fill_while_a_frame_waits():
    # 12 streams of 1 every 10 on one lane miss (12 > 10); in batches of 4 taking 1.6: the 11
    # frames ahead fill 2 batches, one more begun before may be running, then its own: 3 x 1.6
    one = one_task("cam", 10.0, 1, 1.0, streams=12)
    assert not analyse([one])["cam"].schedulable
    four = one_task("cam", 10.0, 1, 1.6, streams=12)
    four.batch = {"gpu": 4}
    res = analyse([four])["cam"]
    assert res.response_worst == pytest.approx(4 * 1.6) and res.schedulable
    assert utilisation([four]) == pytest.approx({"gpu": 12 * 1.6 / 4 / 10})
    out = simulate_streams([four], {"gpu": 1}, {}, 100.0)
    assert out.worst["cam"] == pytest.approx(3 * 1.6)  # 12 released together: 3 batches


def test_higher_priority_streams_count_each_stream():
    hp = one_task("hp", 10.0, 1, 2.0, streams=3)
    lo = one_task("lo", 40.0, 2, 1.0)
    # one lane: 3 hp firings released together, then lo: 6 + 1
    assert analyse([hp, lo])["lo"].response_worst == pytest.approx(7.0)
    assert utilisation([hp, lo]) == pytest.approx({"gpu": 0.6 + 1 / 40})
    assert utilisation([hp, lo], {"gpu": 2}) == pytest.approx({"gpu": (0.6 + 1 / 40) / 2})


def test_the_same_set_on_a_laned_element_is_one_lane_where_lanes_are_one():
    hp = chain("H", 10.0, 1, [("cpu", 1.0), ("gpu", 5.0)])
    lo = chain("L", 40.0, 2, [("gpu", 1.0)])
    assert analyse([hp, lo], {"gpu": 1})["L"].response_worst == \
        pytest.approx(analyse([hp, lo])["L"].response_worst)


def test_a_gpu_servers_camera_streams_fit_on_lanes_and_not_on_one():
    # resnet18-like: 1.3 ms a frame on one lane, 24 lanes run 4,700 frames/s (each firing
    # 3.93x slower); 120 streams at 33 ms (3,600 frames/s) due in 100 ms
    t1, s24 = 1.3e-3, 24 / (4700 * 1.3e-3)

    def cams(n, slowdown):
        return AppSchedule("cam", 0.033, 1, [Task("t", "gpu", t1 * slowdown)], [], n, 0.1)

    assert analyse([cams(120, s24)], {"gpu": 24})["cam"].schedulable
    assert not analyse([cams(120, 1.0)])["cam"].schedulable
    # past the lanes' 4,700 frames/s (155 streams) the bound grows past any deadline
    assert not analyse([cams(160, s24)], {"gpu": 24})["cam"].schedulable
    out = simulate_streams([cams(120, s24)], {"gpu": 24}, {}, 0.5)
    assert out.missed["cam"] == 0
    assert out.worst["cam"] <= analyse([cams(120, s24)], {"gpu": 24})["cam"].response_worst


# ---------------------------------------------------------------- against the simulation


def valid_bounds(apps, res):
    """Apps whose bound the analysis vouches for: below its limit, one stream's frames not in
    each other's way unless the deadline allows it (bound within the period), and every
    higher-priority app's bound valid too."""
    ok = {}
    for a in sorted(apps, key=lambda a: a.priority):
        r = res[a.name].response_worst
        own = a.relative_deadline > a.period or r <= a.period + 1e-9
        ok[a.name] = (r < default_limit(a) and own
                      and all(ok[h.name] for h in apps if h.priority < a.priority))
    return ok


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(1, 3))
def test_the_bound_is_never_below_the_simulated_worst(seed, n_apps, elements_):
    rng = np.random.default_rng(seed)
    apps, lanes = random_stream_set(rng, n_apps, elements_, load=float(rng.uniform(0.3, 1.0)))
    res = analyse(apps, lanes)
    offsets = {(a.name, s): float(rng.uniform(0, a.period)) if rng.random() < 0.7 else 0.0
               for a in apps for s in range(a.streams)}
    horizon = 12 * max(a.period for a in apps)
    out = simulate_streams(apps, lanes, offsets, horizon)
    ok = valid_bounds(apps, res)
    for a in apps:
        if ok[a.name]:
            assert out.worst[a.name] <= res[a.name].response_worst + 1e-9, (a.name, out, res)
    if all(r.schedulable for r in res.values()):
        assert not any(out.missed.values()), (out, res)


def test_random_stream_sets_vary_streams_lanes_and_deadlines():
    rng = np.random.default_rng(5)
    sets = [random_stream_set(rng) for _ in range(40)]
    assert {a.streams for apps, _ in sets for a in apps} >= {1, 2, 6}
    assert {k for _, lanes in sets for k in lanes.values()} == {1, 2, 3, 4}
    assert any(a.relative_deadline > a.period for apps, _ in sets for a in apps)
    assert any(a.relative_deadline < a.period for apps, _ in sets for a in apps)
    admitted = sum(all(r.schedulable for r in analyse(apps, lanes).values())
                   for apps, lanes in sets)
    assert 0 < admitted < len(sets)  # the generator makes both kinds


# ---------------------------------------------------------------- cost model and search


def test_lane_factor_reads_the_curve_and_never_undercuts_fewer_lanes():
    a = with_lanes(app_problem(5, 1, 0.05, 1), {1: 1.0, 2: 1.3, 4: 1.2, 8: 2.4})
    p = a.problem
    assert lane_factor(p, "gpu0", 1) == 1.0
    assert lane_factor(p, "gpu0", 2) == pytest.approx(1.3)
    assert lane_factor(p, "gpu0", 4) == pytest.approx(1.3)  # 1.2 measured, 1.3 at 2 lanes
    assert lane_factor(p, "gpu0", 8) == pytest.approx(2.4)
    assert lane_factor(p, "cpu0", 4) == 4.0  # no curve: no gain from lanes


def test_schedule_of_fires_at_the_mappings_lanes_with_the_apps_streams():
    a = with_lanes(app_problem(5, 1, 0.05, 1, streams=6, deadline=0.1))
    layers = [l.name for l in a.graph.layers]
    one = schedule_of(a, one_mapping(layers, "gpu0", 1))
    four = schedule_of(a, one_mapping(layers, "gpu0", 4))
    assert four.times.sum() == pytest.approx(one.times.sum() * 1.5)
    assert (four.streams, four.deadline, four.period) == (6, 0.1, 0.05)


def one_mapping(layers, element, lanes):
    return Mapping({l: element for l in layers}, lanes={element: lanes}, batch={element: 1})


def cameras(streams=20):
    """A camera model with 20 streams every 20 ms (each frame ~1.6 ms on the GPU alone, ~6 ms
    on a core) beside a small app: one GPU lane cannot take the cameras, lanes can."""
    els = elements()
    cam = with_lanes(app_problem(6, 3, 0.020, 2, els, "cam", streams=streams, deadline=0.030))
    other = with_lanes(app_problem(5, 4, 0.050, 1, els, "other"))
    return MultiProblem([other, cam])


def test_the_search_gives_the_gpu_lanes_and_the_plan_keeps_them(tmp_path):
    mp = cameras()
    res = search_multi(mp, pop_size=16, generations=6, seed=2)
    assert res.chosen.feasible
    gpu_lanes = res.chosen.lanes.get("gpu0", 1)
    assert gpu_lanes > 1
    plan = make_multiplan(mp, res)
    cam = next(a for a in plan.apps if a.name == "cam")
    assert (cam.streams, cam.deadline) == (20, 0.030)
    assert cam.plan.mapping.lanes.get("gpu0") == gpu_lanes
    plan.save(tmp_path / "m.json")
    d = json.loads((tmp_path / "m.json").read_text())
    entry = next(a for a in d["apps"] if a["name"] == "cam")
    assert entry["streams"] == 20 and entry["deadline_s"] == 0.030
    # each application's plan loads with its lanes (what a laned multi-CNN engine would run)
    loaded = Plan.from_dict(entry["plan"], "cam")
    assert loaded.mapping.lanes["gpu0"] == gpu_lanes
    # and the multi-plan loads back with its streams, lanes and deadline for run-multi
    back = next(a for a in MultiPlan.load(tmp_path / "m.json").apps if a.name == "cam")
    assert (back.streams, back.deadline) == (20, 0.030)
    assert back.release_every == pytest.approx(back.period / 20)
    assert back.plan.mapping.lanes["gpu0"] == gpu_lanes


def test_more_cameras_than_lanes_take_fit_in_batches_and_the_plan_keeps_them(tmp_path):
    mp = cameras(streams=45)  # past the 41 streams that lanes alone admit
    with pytest.raises(InfeasibleError):
        search_multi(mp, pop_size=8, generations=3, seed=2)
    for a in mp.apps:
        with_batches(a)
    assert mp.server_options("gpu0") == [(k, b) for k in (1, 2, 4, 8) for b in (1, 2, 4, 8)]
    res = search_multi(mp, pop_size=16, generations=6, seed=2)
    # the GPU's batch, on its shared lanes or on lanes of the cameras' own
    cam = next(s for s in res.chosen.schedules if s.name == "cam")
    (where, b), = cam.batch.items()
    assert res.chosen.feasible and b > 1 and res.chosen.batch[where] == b
    assert where in ("gpu0", "gpu0[cam]")
    plan = make_multiplan(mp, res)
    entry = next(a for a in plan.apps if a.name == "cam")
    assert entry.plan.mapping.batch["gpu0"] == b
    plan.save(tmp_path / "m.json")
    back = next(a for a in MultiPlan.load(tmp_path / "m.json").apps if a.name == "cam")
    assert back.streams == 45 and back.plan.mapping.batch["gpu0"] == b


def test_the_same_cameras_on_one_lane_are_refused():
    mp = cameras()
    for a in mp.apps:
        a.problem.lane_slowdown.clear()
    with pytest.raises(InfeasibleError, match="bottleneck element"):
        search_multi(mp, pop_size=8, generations=3, seed=2)


def test_largest_admitted_streams_and_the_bottleneck():
    mp = cameras()

    def search(m):
        return search_multi(m, pop_size=8, generations=3, seed=2)

    answer = largest_admitted(mp, "cam", search)
    assert answer.streams >= 20
    assert answer.result.chosen.feasible
    assert answer.result.chosen.analysis["cam"].streams == answer.streams
    assert "bottleneck element" in answer.refused
    # one more is refused by the same search
    with pytest.raises(InfeasibleError):
        search(with_streams(mp, "cam", answer.streams + 1))
    with pytest.raises(InputError, match="--max-streams nope: no application"):
        with_streams(mp, "nope", 3)


def test_frame_bounds_of_streams_iterate_to_a_fixed_point():
    cams = one_task("cam", 10.0, 1, 1.0, streams=4)
    ready, finish = frame_bounds(cams, [cams], lanes={"gpu": 2})
    assert finish.max() == pytest.approx(2.5)


# ---------------------------------------------------------------- lanes of each application's own


def urgent_beside_cameras():
    """A short-deadline application that only the GPU runs in time (about 1.3 ms there, 5 on
    a core; due in 2.5 ms) beside 20 camera streams that need the GPU's batches: on shared
    lanes a camera batch already running holds the urgent frame past its deadline."""
    els = elements()
    urgent = with_batches(with_lanes(app_problem(5, 7, 0.0025, 1, els, "urgent")))
    cams = with_batches(with_lanes(app_problem(6, 3, 0.020, 2, els, "cam", streams=20,
                                               deadline=0.060)))
    return MultiProblem([urgent, cams])


def test_lanes_of_its_own_admit_what_shared_lanes_refuse(tmp_path):
    mp = urgent_beside_cameras()
    with pytest.raises(InfeasibleError):
        search_multi(mp, pop_size=16, generations=6, seed=2, gpu_lanes="shared")
    res = search_multi(mp, pop_size=24, generations=10, seed=2)  # auto: both ways searched
    chosen = res.chosen
    assert chosen.feasible and chosen.own_lanes
    assert {s.name: s.elements for s in chosen.schedules}["urgent"] == ["gpu0[urgent]"]
    k = {n: chosen.lanes[f"gpu0[{n}]"] for n in ("urgent", "cam")}
    b = {n: chosen.batch.get(f"gpu0[{n}]", 1) for n in ("urgent", "cam")}
    frames = k["urgent"] * b["urgent"] + k["cam"] * b["cam"]
    assert chosen.device_frames == {"gpu0": frames}
    # a firing of one frame takes its time at as many lanes as the device holds frames
    assert b["urgent"] == 1
    urgent = mp.apps[0]
    alone = schedule_of(urgent, chosen.mappings[0])
    assert alone.times.sum() * lane_factor(urgent.problem, "gpu0", frames) / \
        lane_factor(urgent.problem, "gpu0", k["urgent"]) == pytest.approx(
            next(s for s in chosen.schedules if s.name == "urgent").times.sum())
    plan = make_multiplan(mp, res)
    assert plan.gpu_lanes == "own"
    plan.save(tmp_path / "m.json")
    back = MultiPlan.load(tmp_path / "m.json")
    assert back.gpu_lanes == "own"
    assert {a.name: a.plan.mapping.lanes.get("gpu0") for a in back.apps} == k
    assert "gpu0[urgent]" not in json.dumps(back.apps[0].plan.to_dict())  # plans name the GPU


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2]),
       st.sampled_from([1, 2, 4, 8]))
def test_on_lanes_of_its_own_a_lower_priority_batch_never_holds_a_frame(k_low, b_low, k_hi, b2):
    # on lanes of its own, the higher-priority bound is its bound alone at the device's load
    # (frames at once): a lower-priority batch adds load, never a wait; on shared lanes a
    # longer lower-priority batch is a longer blocking
    mp = urgent_beside_cameras()
    urgent, cams = mp.apps
    on_gpu = [Mapping({l.name: "gpu0" for l in a.graph.layers}) for a in mp.apps]

    def bound(b_cam: int, own: bool) -> float:
        mine = replace(on_gpu[0], lanes={"gpu0": k_hi if own else k_low},
                       batch={"gpu0": 1 if own else b_cam})
        theirs = replace(on_gpu[1], lanes={"gpu0": k_low}, batch={"gpu0": b_cam})
        return evaluate_joint(mp, [mine, theirs], own=own).analysis["urgent"].response_worst

    for b in (b_low, b2):
        alone = schedule_of(urgent, replace(on_gpu[0], lanes={"gpu0": k_hi}),
                            {"gpu0": k_hi + k_low * b})
        want = analyse([alone], {"gpu0[urgent]": k_hi})["urgent"].response_worst
        assert bound(b, True) == pytest.approx(want)
    lo, hi = sorted((b_low, b2))
    assert bound(lo, False) <= bound(hi, False) + 1e-12
    if lo < hi:
        assert bound(lo, False) < bound(hi, False)
