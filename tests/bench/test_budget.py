"""`hetflow bench --budget`'s decisions, without timing anything: `fit` (what to shorten and
what to skip in the time left), the bench's cost estimates and drop order, and `Budget` on a
clock the test moves by hand."""
import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from hetflow.bench.budget import (MINIMUMS, PLAN_BUILDS, Budget, Facts, Part, costs, fit, parts,
                                  plan_extra, scaled, summary)

FULL = {"profile_repeats": 5, "lane_seconds": 0.5, "baseline_seconds": 2.0, "pilot_seconds": 0.4,
        "under_load_seconds": 1.0, "plan_seconds": 1.0, "frames": 120, "warmup": 20}
KINDS = ["pipeline", "single", "balanced"]


@st.composite
def work(draw):
    """Parts as the bench makes them: required ones, and per plan kind the kind itself with
    pilots and re-timing that belong to it, in a drop order by tier and position."""
    out = []
    for i in range(draw(st.integers(0, 3))):
        least = draw(st.floats(0, 20))
        out.append(Part(f"required {i}", least + draw(st.floats(0, 20)), least))
    for pos in range(draw(st.integers(0, 4))):
        for tier, what in ((3, f"plan {pos}"), (1, f"pilots of {pos}"), (2, f"re-timing of {pos}")):
            if tier != 3 and not draw(st.booleans()):
                continue
            least = draw(st.floats(0, 10))
            out.append(Part(what, least + draw(st.floats(0, 10)), least, (tier, -pos),
                            None if tier == 3 else f"plan {pos}"))
    if draw(st.booleans()):
        out.append(Part("reference rows", draw(st.floats(1, 5)), 1.0, (0, 0)))
    return out


@settings(max_examples=400, deadline=None)
@given(work(), st.floats(-5, 120))
def test_fit_shortens_before_it_skips_and_never_skips_what_fits(ps, left):
    got = fit(ps, left)
    by_name = {p.name: p for p in ps}
    kept = [p for p in ps if p.name not in got.dropped]
    required = sum(p.least_s for p in ps if p.drop is None)
    assert 0.0 <= got.scale <= 1.0
    assert got.ok == (required <= left)
    if not got.ok:  # the model fails: nothing is measured
        return
    assert all(by_name[n].drop is not None for n in got.dropped)  # required parts stay
    least = sum(p.least_s for p in kept)
    full = sum(p.full_s for p in kept)
    assert got.least_s == pytest.approx(least)
    assert got.need_s == pytest.approx(least + got.scale * (full - least))
    assert got.need_s <= left + 1e-6  # what is kept fits, at the scale chosen
    if sum(p.full_s for p in ps) <= left:
        assert got.scale == 1.0 and got.dropped == ()
    elif sum(p.least_s for p in ps) <= left:
        assert got.dropped == ()  # shortening was enough
    if got.scale < 1.0:
        assert got.need_s == pytest.approx(left)  # no time given away
    for n in got.dropped:
        p = by_name[n]
        assert p.of is None or p.of in got.dropped or least + p.least_s > left  # none fits back
    for p in kept:  # nothing kept that belongs to a skipped part
        assert p.of is None or p.of not in got.dropped


@pytest.mark.parametrize("scale, expect", [
    (1.0, FULL),
    (0.0, MINIMUMS),
    (0.5, {"profile_repeats": 4, "lane_seconds": 0.4, "baseline_seconds": 1.25, "pilot_seconds": 0.25,
           "under_load_seconds": 0.65, "plan_seconds": 0.65, "frames": 80, "warmup": 12}),
])
def test_scaled_settings_lie_between_their_minimums_and_the_full_settings(scale, expect):
    assert scaled(FULL, scale) == expect


def test_a_setting_already_below_its_minimum_is_kept():
    assert scaled({"baseline_seconds": 0.2, "frames": 10, "other": 7.0}, 0.0) == {
        "baseline_seconds": 0.2, "frames": 10, "other": 7.0}


def plan_facts(**kw) -> Facts:
    return Facts(**{"frame_s": 0.02, "fps": 100.0, "kinds": KINDS, "pilots": 3, **kw})


def test_the_parts_of_a_bench_and_the_order_they_are_skipped_in():
    ps = parts(FULL, plan_facts(profile=True, baselines=True, references=2, elements=2,
                                build_s=0.1))
    order = [p.name for p in sorted((p for p in ps if p.drop is not None), key=lambda p: p.drop)]
    assert order == ["reference rows (one lane)", "pilots of balanced", "pilots of single",
                     "pilots of pipeline", "re-timing of balanced", "re-timing of single",
                     "re-timing of pipeline", "plan balanced", "plan single", "plan pipeline"]
    assert [p.name for p in ps if p.drop is None] == ["profile", "baselines"]
    assert all(p.least_s <= p.full_s for p in ps)
    assert {p.of for p in ps if p.name.startswith(("pilots", "re-timing"))} == {
        f"plan {k}" for k in KINDS}


def test_cost_estimates_follow_the_settings():
    f = plan_facts(baselines=True)
    at = {name: s for name, s, _, _ in costs(FULL, f)}
    longer = {name: s for name, s, _, _ in costs({**FULL, "baseline_seconds": 3.0,
                                                   "pilot_seconds": 2.0}, f)}
    # peak single and the parallel copies' two passes
    assert longer["baselines"] == pytest.approx(at["baselines"] + 3 * 1.0)
    # the first kind's three pilots of 200 frames instead of their least, 60; a later one's one
    assert longer["pilots of pipeline"] == pytest.approx(at["pilots of pipeline"] + 3 * 1.4)
    assert longer["pilots of single"] == pytest.approx(at["pilots of single"] + 1.4)
    # a plan run lasts at least its frames: 120 frames at 100 fps beat 1 s
    assert at["plan single"] > 1.2
    assert "pilots of single" not in {n for n, *_ in costs(FULL, plan_facts(pilots=1))}
    # once designs were piloted, a kind is counted one new pilot run
    again = {name: s for name, s, _, _ in costs(FULL, plan_facts(piloted=True))}
    assert again["pilots of pipeline"] == pytest.approx(at["pilots of pipeline"] / 3)
    assert "re-timing of single" not in {n for n, *_ in costs(FULL, plan_facts(refine=False))}


def test_a_precision_screen_counts_in_the_profile_s_estimate():
    """Each screened GPU precision builds the reference and the runner and runs the check's
    frames on both before the profile starts (its time is in the profile's limit too)."""
    from hetflow.profile.deviation import DEVIATION_FRAMES

    f = dataclasses.replace(plan_facts(), profile=True, gpus=1, build_s=2.0, frame_s=0.01)
    plain = {name: s for name, s, _, _ in costs(FULL, f)}["profile"]
    screened = {name: s for name, s, _, _ in costs(FULL, dataclasses.replace(f, screens=2))}
    assert screened["profile"] - plain == pytest.approx(2 * (2 * 2.0 + 2 * DEVIATION_FRAMES
                                                             * 0.01))


PILOTS = ("pilots of balanced", "pilots of single", "pilots of pipeline")
RETIMING = ("re-timing of balanced", "re-timing of single", "re-timing of pipeline")


# what a bench of three plan kinds keeps as its time runs short; with these estimates, per
# kind (full / least): a plan run 2.4 / 1.4 s, its re-timing 1.6 / 0.8 s, and pilots of 3.0 s
# for the first kind (three designs of 60 frames at least), 1.0 s for the others (one new
# design each): 16.9 s in all at the full settings, 11.8 s at the least
@pytest.mark.parametrize("left, scale, dropped", [
    (60.0, 1.0, ()),
    (14.0, 0.43, ()),  # shortened only
    (10.0, 0.05, PILOTS[:2]),
    # the first kind's pilots go; the time they free gives the second kind's back
    (8.0, 0.05, ("pilots of balanced", "pilots of pipeline")),
    (5.0, 0.27, PILOTS + RETIMING),
    (4.0, 0.13, PILOTS + RETIMING[:2] + ("plan balanced",)),
    (2.0, 0.62, PILOTS + RETIMING + ("plan balanced", "plan single")),
    (1.0, 1.0, PILOTS + RETIMING + ("plan balanced", "plan single", "plan pipeline")),
])
def test_what_plan_kinds_keep_in_the_time_left(left, scale, dropped):
    got = fit(parts(FULL, plan_facts()), left)
    assert got.ok and got.dropped == dropped and got.scale == pytest.approx(scale, abs=0.01)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_budget_decides_logs_and_records_on_a_clock_moved_by_hand():
    clock, said = Clock(), []
    b = Budget(22.0, dict(FULL), said.append, clock)
    clock.now += 8.0
    got = b.decide("plan pipeline", plan_facts())
    assert b.left() == 14.0 and got.ok and 0 < got.scale < 1 and not got.dropped
    assert said[-1] == ("budget: 14.0 s left before plan pipeline, about 14.0 s needed with the "
                        "measurements shortened (scale 0.43: 0 the minimums, 1 the full settings)")
    k = b.settings(got, "plan_seconds", "frames")
    assert MINIMUMS["plan_seconds"] < k["plan_seconds"] < FULL["plan_seconds"]
    b.skip("pilots of balanced", "the best predicted design runs unpiloted")
    assert said[-1] == ("budget: skipping pilots of balanced (the best predicted design runs "
                        "unpiloted)")
    clock.now += 15.0
    notes = b.notes()
    assert notes["seconds"] == 22.0 and notes["spent"] == 23.0
    assert notes["skipped"] == ["pilots of balanced"]
    assert notes["scaled"]["plan_seconds"] == {"from": 1.0, "to": k["plan_seconds"]}
    assert "frames" in notes["scaled"] and len(notes["decisions"]) == 1
    line = summary(notes)
    assert line.startswith("budget 22.0 s, took 23.0 s (over by 1.0 s); skipped: pilots of "
                           "balanced; shortened: plan_seconds 1 -> ")


def test_a_budget_that_cannot_hold_the_required_parts_says_so():
    clock, said = Clock(), []
    b = Budget(1.5, dict(FULL), said.append, clock)
    got = b.decide("the baselines", plan_facts(baselines=True))
    assert not got.ok and got.least_s > 1.5
    assert said[-1] == ("budget: 1.5 s left before the baselines, the required parts need about "
                        "2.7 s at the least")  # three runs of 0.9 s


def test_the_shortest_settings_used_are_the_ones_noted():
    clock = Clock()
    b = Budget(100.0, dict(FULL), clock=clock)
    b.settings(fit([Part("x", 10, 0)], 5.0), "baseline_seconds")  # scale 0.5
    b.settings(fit([Part("x", 10, 0)], 8.0), "baseline_seconds")  # scale 0.8: longer
    assert b.notes()["scaled"] == {"baseline_seconds": {"from": 2.0, "to": 1.25}}
    assert summary(b.notes()) == ("budget 100.0 s, took 0.0 s; skipped: nothing; shortened: "
                                  "baseline_seconds 2 -> 1.25")


def test_a_plan_kind_is_counted_its_builds_until_kinds_ran_then_what_they_took_beyond():
    assert plan_extra(1.5, []) == pytest.approx(PLAN_BUILDS * 1.5)
    assert plan_extra(1.5, [4.0, 2.0]) == pytest.approx(3.0)
    assert plan_extra(1.5, [-2.0, 1.0]) == 0.0  # kinds that took less count nothing
    at = {n: s for n, s, _, _ in costs(FULL, plan_facts())}
    more = {n: s for n, s, _, _ in costs(FULL, plan_facts(plan_extra_s=2.5))}
    assert all(more[f"plan {k}"] == pytest.approx(at[f"plan {k}"] + 2.5) for k in KINDS)
    assert {n for n in at if not n.startswith("plan ")} == {
        n for n in more if not n.startswith("plan ")}
    assert all(more[n] == at[n] for n in at if not n.startswith("plan "))


@pytest.mark.parametrize("extra", [0.0, 3.0])
def test_a_kinds_expected_seconds_are_its_kept_parts_at_the_fits_scale(extra):
    """What a kind's run is compared with afterwards: its plan, pilots and re-timing as the fit
    kept them, without the extra it was counted (the overrun replaces that)."""
    clock = Clock()
    b = Budget(10.0, dict(FULL), clock=clock)
    facts = plan_facts(plan_extra_s=extra)
    got = b.decide("plan pipeline", facts)
    ps = {p.name: p for p in parts(FULL, facts)}
    want = sum(ps[n].least_s + got.scale * (ps[n].full_s - ps[n].least_s)
               for n in ("plan pipeline", "pilots of pipeline", "re-timing of pipeline")
               if n not in got.dropped) - extra
    assert b.expected(facts, got, "pipeline") == pytest.approx(want)
    assert 0 < b.expected(facts, got, "pipeline") < 10.0
