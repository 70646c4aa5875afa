import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hetflow.plan.mapping import Mapping
from hetflow.rules import (PILOT_CHALLENGE, PILOT_P99_DRIFT, PILOT_P99_SPREAD, PILOT_RATE_DRIFT,
                           PILOT_RATE_SPREAD)
from hetflow.mapping.pilot import choose_by_pilot, frames_for, pilot_summary
from hetflow.runtime.report import RunReport
from patching import patch_everywhere

CHALLENGE = PILOT_CHALLENGE.value


class _Plan:
    def __init__(self, name, predicted, cores=None):
        self.mapping = Mapping({"l0": name})
        self.app = type("App", (), {"phases": {name: []}})()
        self.strategy = "single"
        self.predicted = {"throughput": predicted, "latency": 1e-3}
        if cores is not None:  # the plan's one element holds this many cores
            self.elements = {name: type("El", (), {"cores": tuple(range(cores))})()}


def _fake_runs(monkeypatch, measured):
    """run_plan replaced: each plan 'measures' (fps, p99) from `measured`; calls counted."""
    calls = []

    def run_plan(plan, graph, frames, warmup, check="first", **_):
        name = next(iter(plan.app.phases))
        calls.append((name, frames))
        fps, p99 = measured[name]
        return RunReport("plan", frames, warmup, fps, {"p50": p99 / 2, "p99": p99})

    patch_everywhere(monkeypatch, "hetflow.runtime.api.run_plan", run_plan)
    return calls


def test_the_measured_best_wins_not_the_predicted_best(monkeypatch):
    calls = _fake_runs(monkeypatch, {"a": (900.0, 0.02), "b": (1100.0, 0.05), "c": (1000.0, 0.01)})
    cands = [(_Plan(n, p), None) for n, p in (("a", 2000.0), ("b", 1500.0), ("c", 1200.0))]
    plan, _, tried = choose_by_pilot(cands, None)
    assert next(iter(plan.app.phases)) == "b"
    assert [t.get("chosen", False) for t in tried] == [False, True, False]
    assert [t["pilot_throughput"] for t in tried] == [900.0, 1100.0, 1000.0]
    # about pilot_seconds at the predicted rate, at least 60 frames
    assert [f for _, f in calls] == [800, 600, 480]


def test_a_latency_cap_is_kept_on_the_measured_p99(monkeypatch):
    _fake_runs(monkeypatch, {"a": (900.0, 0.02), "b": (1100.0, 0.05), "c": (1000.0, 0.01)})
    cands = [(_Plan(n, 1000.0), None) for n in "abc"]
    plan, _, _ = choose_by_pilot(cands, None, latency_cap=0.03)
    assert next(iter(plan.app.phases)) == "c"
    # no candidate keeps the cap: the one closest to it
    plan, _, _ = choose_by_pilot(cands, None, latency_cap=0.001)
    assert next(iter(plan.app.phases)) == "c"


def test_under_a_cap_room_wins_at_nearly_the_same_rate(monkeypatch):
    """A pilot p99 just under the cap may not hold over a full run: a design with room under
    it wins when its pilot rate is within the pilots' noise of the fastest, and not otherwise."""
    _fake_runs(monkeypatch, {"near": (1000.0, 0.029), "roomy": (960.0, 0.015),
                             "slow": (800.0, 0.005), "over": (1200.0, 0.04)})
    cands = [(_Plan(n, 1000.0), None) for n in ("over", "near", "roomy", "slow")]
    plan, _, _ = choose_by_pilot(cands, None, latency_cap=0.03)
    assert next(iter(plan.app.phases)) == "roomy"
    # without the roomy design, the fastest within the cap, near it or not
    plan, _, _ = choose_by_pilot([c for c in cands if c[0].app.phases != {"roomy": []}], None,
                                 latency_cap=0.03)
    assert next(iter(plan.app.phases)) == "near"
    # a cap all of them keep with room: the fastest
    plan, _, _ = choose_by_pilot(cands, None, latency_cap=1.0)
    assert next(iter(plan.app.phases)) == "over"


def test_with_a_rate_floor_the_likeliest_to_keep_both_wins(monkeypatch):
    """The bench's balanced plan: of the pilots within the cap, the fastest piloted near the
    cap; the GPU-only design above the floor, at a fifth of its p99, is the one chosen."""
    _fake_runs(monkeypatch, {"groups": (10648.0, 0.0083), "gpu": (10265.0, 0.0019),
                             "pipe": (2957.0, 0.0010)})
    cands = [(_Plan(n, 1000.0), None) for n in ("groups", "gpu", "pipe")]
    plan, _, _ = choose_by_pilot(cands, None, latency_cap=0.0114)
    assert next(iter(plan.app.phases)) == "groups"
    plan, _, tried = choose_by_pilot(cands, None, latency_cap=0.0114, rate_floor=8048.0)
    assert next(iter(plan.app.phases)) == "gpu"
    assert tried[1]["keep_chance"] > tried[0]["keep_chance"] > tried[2]["keep_chance"]
    # none near the floor (every chance nil): the one that misses it by the fewest spreads
    plan, _, _ = choose_by_pilot(cands, None, latency_cap=0.0114, rate_floor=20000.0)
    assert next(iter(plan.app.phases)) == "groups"
    # only the slow design kept the cap: the GPU, just over it and far above the floor
    plan, _, _ = choose_by_pilot(cands, None, latency_cap=0.0015, rate_floor=8048.0)
    assert next(iter(plan.app.phases)) == "gpu"


def test_with_a_rate_floor_a_p99_at_the_cap_loses_to_room_under_it(monkeypatch):
    """A p99 moves further from pilot to run than a rate: a design piloted just under the cap
    loses to one with room under it (three p99 spreads) that piloted a little slower (still
    above the floor); the summary says each pilot's chance."""
    floor, cap = 1000.0, 0.01
    _fake_runs(monkeypatch, {
        "at_cap": (floor * math.exp(2.0 * PILOT_RATE_SPREAD.value), 0.99 * cap),
        "roomy": (floor * math.exp(1.5 * PILOT_RATE_SPREAD.value),
                  cap * math.exp(-3.0 * PILOT_P99_SPREAD.value))})
    cands = [(_Plan(n, 1000.0), None) for n in ("at_cap", "roomy")]
    plan, _, tried = choose_by_pilot(cands, None, latency_cap=cap, rate_floor=floor)
    assert next(iter(plan.app.phases)) == "roomy"
    assert "chance to keep floor and cap" in pilot_summary(tried)


def test_keep_chance_follows_the_pilots_noise_model():
    from hetflow.mapping.pilot import keep_chance

    RATE_DRIFT, RATE_SPREAD = PILOT_RATE_DRIFT.value, PILOT_RATE_SPREAD.value
    P99_DRIFT, P99_SPREAD = PILOT_P99_DRIFT.value, PILOT_P99_SPREAD.value

    # a pilot whose reading, moved by the mean drift, sits on both bounds: a half each way
    rate, p99 = 1000.0 * math.exp(-RATE_DRIFT), 0.01 * math.exp(-P99_DRIFT)
    assert keep_chance(rate, p99, 1000.0, 0.01)[0] == pytest.approx(0.25)
    # one spread above the floor and one below the cap: 0.8413 each way
    chance, margin = keep_chance(rate * math.exp(RATE_SPREAD), p99 * math.exp(-P99_SPREAD),
                                 1000.0, 0.01)
    assert chance == pytest.approx(0.8413 ** 2, abs=1e-4) and margin == pytest.approx(1.0)
    assert keep_chance(0.0, p99, 1000.0, 0.01) == (0.0, -math.inf)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(1.0, 1e4), st.floats(1e-4, 1.0)), min_size=1, max_size=6),
       st.floats(1e-4, 1.0), st.floats(1.0, 1e4))
@example(pilots=[(1.0, 1.0), (1.0000000000000002, 0.5)], cap=1.0, floor=5.0)  # equal chances
def test_a_rate_floor_choice_is_never_beaten_on_both_counts(pilots, cap, floor):
    """No other pilot ran faster at a lower p99 than the choice; where one kept the floor and
    the cap with room (1.3x the floor, 0.3 of the cap), the choice kept both."""
    from hetflow.mapping.pilot import _pick

    tried = [{"pilot_throughput": r, "pilot_latency_p99": l} for r, l in pilots]
    i = _pick(tried, list(range(len(tried))), cap, None, floor)
    r, l = pilots[i]
    assert not any(rj > r and lj < l for rj, lj in pilots)
    if any(rj >= 1.3 * floor and lj <= 0.3 * cap for rj, lj in pilots):
        assert r >= floor and l <= cap


def test_where_no_pilot_kept_cap_and_floor_the_least_miss_wins(monkeypatch):
    """No pilot kept both: a design 1% under the floor and far under the cap wins over one
    above the floor at 1.6x the cap, and over one at half the floor."""
    _fake_runs(monkeypatch, {"over_cap": (1040.0, 0.016), "under_floor": (990.0, 0.004),
                             "slow": (500.0, 0.009)})
    cands = [(_Plan(n, 1000.0), None) for n in ("over_cap", "under_floor", "slow")]
    plan, _, _ = choose_by_pilot(cands, None, latency_cap=0.01, rate_floor=1000.0)
    assert next(iter(plan.app.phases)) == "under_floor"


def test_with_a_rate_floor_p99s_far_under_the_cap_go_to_the_faster(monkeypatch):
    """A lower p99 far under the cap buys nothing: the faster design wins, whether or not the
    other's p99 is lower still."""
    for pipe_p99 in (0.0074, 0.0050):
        _fake_runs(monkeypatch, {"pipe": (2362.0, pipe_p99), "gpu": (2801.0, 0.0079),
                                 "groups": (2642.0, 0.0193)})
        cands = [(_Plan(n, 1000.0), None) for n in ("pipe", "gpu", "groups")]
        plan, _, _ = choose_by_pilot(cands, None, latency_cap=0.0525, rate_floor=2120.0)
        assert next(iter(plan.app.phases)) == "gpu"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.8, 1.3), st.floats(1e-3, 0.3)), min_size=2, max_size=6,
                unique_by=lambda p: round(p[0], 3)))
def test_with_a_rate_floor_room_far_under_the_cap_buys_no_place(pilots):
    """Every pilot far under the cap (at most 0.3 of it) and near the floor: the fastest is
    chosen, however much lower another's p99 (fewer lanes, fewer frames in flight)."""
    from hetflow.mapping.pilot import _pick

    floor, cap = 1000.0, 0.01
    tried = [{"pilot_throughput": r * floor, "pilot_latency_p99": l * cap} for r, l in pilots]
    i = _pick(tried, list(range(len(tried))), cap, None, floor)
    assert pilots[i][0] == max(r for r, _ in pilots)


def test_the_copies_design_stays_unless_beaten_by_more_than_the_noise(monkeypatch):

    def pick(measured, **kw):
        _fake_runs(monkeypatch, measured)
        cands = [(_Plan(n, 1000.0), None) for n in measured]
        plan, _, tried = choose_by_pilot(cands, None, incumbent=lambda p: "copies" in p.app.phases,
                                         **kw)
        assert sum(bool(t.get("chosen")) for t in tried) == 1
        return next(iter(plan.app.phases))

    near = 1000.0 * CHALLENGE * 0.99
    assert pick({"groups": (near, 0.01), "copies": (1000.0, 0.05)}) == "copies"
    assert pick({"groups": (1000.0 * CHALLENGE * 1.01, 0.01), "copies": (1000.0, 0.05)}) == "groups"
    assert pick({"groups": (900.0, 0.01), "copies": (1000.0, 0.05)}) == "copies"
    # no incumbent among the candidates: the fastest
    assert pick({"groups": (near, 0.01), "gpu": (1000.0, 0.05)}) == "groups"
    # under a latency cap the cap decides, not the incumbent
    assert pick({"groups": (near, 0.01), "copies": (1000.0, 0.05)}, latency_cap=1.0) == "groups"


def test_a_throughput_plan_gives_up_no_rate_for_fewer_cores(monkeypatch):
    """The GPU alone (its one driving core) piloted 0.3% below the GPU beside fifteen CPU
    copies: the copies' design, the incumbent, stays; the GPU alone takes its place only
    beating it by CHALLENGE."""
    def pick(gpu_rate):
        _fake_runs(monkeypatch, {"copies": (4747.0, 0.047), "gpu": (gpu_rate, 0.006),
                                 "groups": (4700.0, 0.013)})
        cands = [(_Plan("copies", 1.0, 16), None), (_Plan("gpu", 1.0, 1), None),
                 (_Plan("groups", 1.0, 16), None)]
        plan, _, _ = choose_by_pilot(cands, None, incumbent=lambda p: "copies" in p.app.phases)
        return next(iter(plan.app.phases))

    assert pick(4733.0) == "copies"
    assert pick(4760.0) == "copies"
    assert pick(CHALLENGE * 4747.0 * 1.001) == "gpu"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(1.0, 1e4), st.integers(1, 16)), min_size=1, max_size=6),
       st.none() | st.integers(0, 5))
def test_without_a_cap_the_choice_is_the_fastest_or_the_incumbent(pilots, held):
    """Cores never buy a place: the pick is the fastest pilot, or the incumbent where none
    beats it by CHALLENGE."""
    from hetflow.mapping.pilot import _pick

    tried = [{"pilot_throughput": r, "pilot_latency_p99": 0.01, "cores": c} for r, c in pilots]
    ran = list(range(len(tried)))
    held = held if held is not None and held < len(tried) else None
    i = _pick(tried, ran, None, held)
    fastest = max(r for r, _ in pilots)
    if held is not None and fastest < CHALLENGE * pilots[held][0]:
        assert i == held
    else:
        assert pilots[i][0] == fastest


def test_each_mapping_is_piloted_once_per_model(monkeypatch):
    calls = _fake_runs(monkeypatch, {"a": (900.0, 0.02), "b": (1100.0, 0.05)})
    pilots = {}
    for _ in range(2):
        choose_by_pilot([(_Plan("a", 1.0), None), (_Plan("b", 1.0), None)], None,
                        pilots=pilots)
    assert sorted(n for n, _ in calls) == ["a", "b"]
    # one candidate: nothing to choose, nothing run
    plan, _, tried = choose_by_pilot([(_Plan("z", 1.0), None)], None, pilots=pilots)
    assert tried == [] and len(calls) == 2


def test_frames_for_a_run_follow_the_predicted_rate():
    assert frames_for(_Plan("a", 3000.0), 1.0, 120) == 3000
    assert frames_for(_Plan("a", 50.0), 1.0, 120) == 120
    assert frames_for(_Plan("a", float("nan")), 1.0, 120) == 120
    assert frames_for(_Plan("a", 1e9), 1.0, 120) == 20000


def test_a_design_that_fails_its_pilot_is_listed_and_the_others_compete(monkeypatch):
    from hetflow.errors import RuntimeFault

    measured = {"a": (900.0, 0.02), "c": (1000.0, 0.01)}

    def run_plan(plan, graph, frames, warmup, check="first", **_):
        name = next(iter(plan.app.phases))
        if name not in measured:
            raise RuntimeFault(f"element {name}: died")
        fps, p99 = measured[name]
        return RunReport("plan", frames, warmup, fps, {"p50": p99 / 2, "p99": p99})

    patch_everywhere(monkeypatch, "hetflow.runtime.api.run_plan", run_plan)
    cands = [(_Plan(n, 1000.0), None) for n in "abc"]
    plan, _, tried = choose_by_pilot(cands, None)
    assert next(iter(plan.app.phases)) == "c"
    assert tried[1]["pilot_error"] == "element b: died" and "pilot_throughput" not in tried[1]
    with pytest.raises(RuntimeFault, match="element b: died"):
        choose_by_pilot([(_Plan("b", 1.0), None), (_Plan("z", 1.0), None)], None)



def test_the_summary_names_the_choice_and_the_rest():
    tried = [{"stages": ["a", "b"], "predicted_throughput": 10.0, "pilot_throughput": 9.0,
              "pilot_latency_p99": 0.2},
             {"stages": ["c"], "predicted_throughput": 8.0, "pilot_error": "boom", "chosen": False},
             {"stages": ["d|e"], "predicted_throughput": 7.0, "pilot_throughput": 9.5,
              "pilot_latency_p99": 0.1, "chosen": True}]
    assert pilot_summary(tried) == (
        "chose d|e (predicted 7.0 fps, pilot 9.5 fps, p99 100.0 ms) over a + b (predicted 10.0 "
        "fps, pilot 9.0 fps, p99 200.0 ms); c (predicted 8.0 fps, pilot error: boom)")



def test_a_run_lasts_a_few_of_the_slowest_frames_latency():
    slow = _Plan("a", 700.0)
    slow.predicted["latency"] = 0.5  # single-core members beside a fast GPU
    assert frames_for(slow, 0.4, 60) == 1400  # 4 latencies at the predicted rate, not 0.4 s
    assert frames_for(_Plan("a", 700.0), 0.4, 60) == 280  # a short latency: `seconds` rules
