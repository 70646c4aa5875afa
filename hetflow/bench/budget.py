"""`hetflow bench --budget`: what to measure, and for how long, in the time left.

Before each phase of a model's bench (its profile, the baselines, each plan kind) the bench
estimates what every phase still to come costs twice: at the full settings and with every
measurement at its minimum (`MINIMUMS`). `fit` then keeps the full settings if they fit in the
time left; else shortens every measurement by one factor (`scale`, 1 = full, 0 = minimum); and
only when even the minimums do not fit, skips parts, least important first: the one-lane
reference rows, a plan kind's pilots (the best predicted design is kept without them), its
re-timing (the plan's a priori prediction is kept), then whole plan kinds, the last first. The
decision is taken again before every phase with what was measured meanwhile, so a part skipped
in a look-ahead can come back when the earlier phases took less than estimated.

The estimates are rough (overheads of a few tenths of a second per run, a profile's cost from
one timed frame of the whole model): they decide what to shorten or skip, and the bench says
what it did; they are no promise of the finishing time."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from hetflow.errors import HetflowError
from hetflow.profile.deviation import DEVIATION_FRAMES
from hetflow.profile.lanes import LANE_COUNTS, MORE_COUNTS

# the least each setting is shortened to (a setting already below it is kept as given)
MINIMUMS: dict[str, float] = {"profile_repeats": 3, "lane_seconds": 0.3, "baseline_seconds": 0.5,
                              "pilot_seconds": 0.1, "under_load_seconds": 0.3,
                              "plan_seconds": 0.3, "frames": 40, "warmup": 5}
INTEGER = {"profile_repeats", "frames", "warmup"}

RUN_OVERHEAD_S = 0.3  # a measured run's set-up, start and end beside its measured window
COMM_S = 0.7  # the profile's hand-off benchmark (0.6-0.7 s on every machine measured)
# the profile's lane table of one GPU: up to 6 lane counts timed alone and beside busy CPU
# copies (profile/lanes.py), `lane_seconds` each; plus its conversion and captures, and the busy
# copies' first and last frames (they run through all the busy counts)
LANE_RUNS, LANES_BUILD_S = 2 * (len(LANE_COUNTS) + len(MORE_COUNTS)), 4.0
PROFILE_WARMUP = 3  # profile_model's default warm-up runs
PILOT_FRAMES, PILOT_WARMUP = 60, 10  # mapping/pilot.py: a pilot runs at least 60 frames
MAX_FRAMES = 20000  # mapping/pilot.py frames_for: a run's frames at most
CHECKED_FRAMES = 8  # a plan run checks its first frames against a reference run of the model
# a plan kind's runners on elements nothing ran on before (a data-parallel plan of vgg19 over
# seven 2-core groups builds seven sessions of the whole model) and the reference session,
# counted a priori as this many whole-model builds; once a kind has run, what the kinds so far
# took beyond their estimates replaces it (`Facts.plan_extra_s`)
PLAN_BUILDS = 3


class BudgetError(HetflowError):
    """A model's share of the budget cannot cover its profile and baselines."""

    exit_code = 1


def scaled(full: Mapping[str, float], scale: float) -> dict[str, float]:
    """Each setting of `full` named in MINIMUMS between its minimum (scale 0) and its full value
    (scale 1); a setting at or below its minimum stays as it is."""
    out: dict[str, float] = {}
    for k, v in full.items():
        lo = MINIMUMS.get(k)
        x = v if lo is None or v <= lo else lo + max(0.0, min(1.0, scale)) * (v - lo)
        out[k] = int(math.floor(x)) if k in INTEGER else round(x, 3)
    return out


@dataclass(frozen=True)
class Part:
    """A part of the work still to do: its estimated seconds at the full settings and at the
    minimums; `drop`: its place in the order parts are skipped in (the smallest goes first;
    None: required); `of`: the part it belongs to (skipped with it)."""
    name: str
    full_s: float
    least_s: float
    drop: tuple[int, int] | None = None
    of: str | None = None


@dataclass(frozen=True)
class Fit:
    scale: float  # 1: the full settings; 0: every measurement at its minimum
    dropped: tuple[str, ...]  # the parts to skip, in the order they were given up
    ok: bool  # False: the required parts do not fit even at their minimums
    need_s: float  # the kept parts' estimate at this scale
    least_s: float  # ... and at their minimums


def fit(parts: Sequence[Part], left_s: float) -> Fit:
    """Shorten first, skip only what the minimums cannot hold (see the module's text)."""
    kept = list(parts)
    dropped: list[Part] = []

    def total(which: str) -> float:
        return sum(getattr(p, which) for p in kept)

    required = sum(p.least_s for p in parts if p.drop is None)
    if required > left_s:
        optional = sorted((p for p in parts if p.drop is not None), key=lambda p: p.drop)
        full = sum(p.full_s for p in parts if p.drop is None)
        return Fit(0.0, tuple(p.name for p in optional), False, full, required)
    while total("least_s") > left_s:
        optional = [p for p in kept if p.drop is not None]
        if not optional:  # the required parts alone, equal to the time left but for rounding
            break
        victim = min(optional, key=lambda p: p.drop)
        gone = {victim.name}
        for p in list(kept):  # the victim, and the parts that belong to it
            if p.name in gone or p.of in gone:
                kept.remove(p)
                dropped.append(p)
    # skipping a large part can leave room for a smaller one given up before it
    names = {p.name for p in kept}
    for p in sorted(dropped, key=lambda p: p.drop, reverse=True):
        if (p.of is None or p.of in names) and total("least_s") + p.least_s <= left_s:
            kept.append(p)
            names.add(p.name)
    dropped = [p for p in dropped if p.name not in names]
    full, least = total("full_s"), total("least_s")
    scale = 1.0 if full <= left_s else (left_s - least) / (full - least) if full > least else 0.0
    scale = max(0.0, min(1.0, scale))
    return Fit(scale, tuple(p.name for p in dropped), True, least + scale * (full - least), least)


# --- estimates -------------------------------------------------------------------------------

@dataclass
class Facts:
    """What the estimates rest on, refreshed before each phase."""
    frame_s: float  # one frame of the whole model on the slowest element
    fps: float  # frames/s of a plan's run (the parallel baseline's, once measured)
    kinds: list[str]  # the plan kinds still to run, in order
    profile: bool = False  # the profile is still to measure
    baselines: bool = False  # the baselines are still to run
    elements: int = 1  # distinct elements the profile measures
    gpus: int = 0
    copies: int = 0  # whole-model CPU copies the lane table keeps busy (the baselines reuse them)
    build_s: float = 0.0  # building one whole-model runner
    references: int = 0  # one-lane reference runs beside the baselines
    screens: int = 0  # whole-model checks of GPU precisions before the profile (--precision auto)
    search_s: float = 0.5  # one plan kind's search
    pilots: int = 1  # pilot candidates per plan kind (1: none run)
    piloted: bool = False  # designs were piloted already: a later kind's candidates mostly
    # were (each run is kept by design), so it is counted one new pilot, the first kind all
    refine: bool = True
    plan_extra_s: float = 0.0  # what a plan kind takes beyond its runs: builds, the reference


def plan_extra(build_s: float, overruns: Sequence[float]) -> float:
    """The seconds each plan kind is counted beyond its runs' estimates: PLAN_BUILDS builds of
    the whole model before any kind ran, then the mean of what the kinds took beyond their
    estimates (never below zero)."""
    if not overruns:
        return PLAN_BUILDS * build_s
    return max(0.0, sum(overruns) / len(overruns))


def run_s(seconds: float, at_least: float, warmup: float, fps: float) -> float:
    """A run of about `seconds` at `fps`, at least `at_least` frames, after its warm-up."""
    frames = min(MAX_FRAMES, max(at_least, fps * seconds))
    return (frames + warmup) / max(fps, 1e-9) + RUN_OVERHEAD_S


def costs(k: Mapping[str, float], f: Facts) -> list[tuple[str, float, int | None, int]]:
    """(part, its estimated seconds at the settings `k`, its tier in the order parts are
    skipped in (None: required), the position of its plan kind)."""
    out: list[tuple[str, float, int | None, int]] = []
    if f.profile:
        per_element = 2 * f.build_s + (1 + 2 * (PROFILE_WARMUP + k["profile_repeats"])) * f.frame_s
        lanes = f.gpus * (LANE_RUNS * k["lane_seconds"] + 2 * f.frame_s + LANES_BUILD_S)
        # a screen builds the reference session and the runner, and runs its frames on both
        screens = f.screens * (2 * f.build_s + 2 * DEVIATION_FRAMES * f.frame_s)
        out.append(("profile", f.elements * per_element + COMM_S + lanes + f.copies * f.build_s
                    + screens, None, 0))
    baseline = k["baseline_seconds"] + 5 * f.frame_s + RUN_OVERHEAD_S
    if f.baselines:
        out.append(("baselines", 3 * baseline, None, 0))  # peak single, parallel twice
        if f.references:
            out.append(("reference rows (one lane)", f.references * baseline, 0, 0))
    for pos, kind in enumerate(f.kinds):
        frames = k["frames"]
        out.append((f"plan {kind}", f.search_s + CHECKED_FRAMES * f.frame_s + f.plan_extra_s
                    + run_s(k["plan_seconds"], frames, max(k["warmup"], frames // 10), f.fps),
                    3, pos))
        if f.pilots > 1:
            fresh = f.pilots if pos == 0 and not f.piloted else 1
            out.append((f"pilots of {kind}", fresh * run_s(k["pilot_seconds"], PILOT_FRAMES,
                                                           PILOT_WARMUP, f.fps), 1, pos))
        if f.refine:
            out.append((f"re-timing of {kind}",
                        2 * (PROFILE_WARMUP + k["profile_repeats"]) * f.frame_s
                        + k["under_load_seconds"] + RUN_OVERHEAD_S, 2, pos))
    return out


def parts(full: Mapping[str, float], f: Facts) -> list[Part]:
    """The parts still to do, with their estimates at the full settings and at the minimums,
    and the order they are skipped in: reference rows, then every kind's pilots, then every
    kind's re-timing, then the kinds themselves; the last kind's first."""
    least = {name: s for name, s, _, _ in costs(scaled(full, 0.0), f)}
    out = []
    for name, s, tier, pos in costs(full, f):
        kind = f.kinds[pos] if tier in (1, 2) else None
        out.append(Part(name, s, least[name], None if tier is None else (tier, -pos),
                        None if kind is None else f"plan {kind}"))
    return out


# --- the budget of one model's bench ---------------------------------------------------------

@dataclass
class Budget:
    """The seconds one model's bench may take, from its start: decides, logs and records."""
    seconds: float
    full: dict[str, float]  # the settings it shortens (names of MINIMUMS)
    log: Callable[[str], None] = lambda msg: None
    clock: Callable[[], float] = time.perf_counter
    skipped: list[str] = field(default_factory=list)
    shortened: dict[str, dict[str, float]] = field(default_factory=dict)
    decisions: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.start = self.clock()

    def left(self) -> float:
        return self.seconds - (self.clock() - self.start)

    def decide(self, before: str, facts: Facts) -> Fit:
        """Fit the work still to do into the time left; say in one line what it keeps."""
        left = self.left()
        got = fit(parts(self.full, facts), left)
        if not got.ok:
            msg = (f"budget: {max(left, 0):.1f} s left before {before}, the required parts need "
                   f"about {got.least_s:.1f} s at the least")
        else:
            msg = (f"budget: {left:.1f} s left before {before}, about {got.need_s:.1f} s needed "
                   + ("at the full settings" if got.scale >= 1 else
                      f"with the measurements shortened (scale {got.scale:.2f}: 0 the minimums, "
                      f"1 the full settings)"))
            if got.dropped:
                msg += " and, for now, without " + ", ".join(got.dropped)
        self.decisions.append(msg)
        self.log(msg)
        return got

    def allowance(self, facts: Facts, got: Fit, part: str) -> float:
        """The seconds `part` may take: the time left less what the other parts the fit kept
        need at its scale."""
        others = sum(p.least_s + got.scale * (p.full_s - p.least_s)
                     for p in parts(self.full, facts)
                     if p.name != part and p.name not in got.dropped)
        return self.left() - others

    def expected(self, facts: Facts, got: Fit, kind: str) -> float:
        """The seconds plan `kind` is estimated to take (its parts the fit kept, at its scale)
        beyond `facts.plan_extra_s`."""
        mine = {f"plan {kind}", f"pilots of {kind}", f"re-timing of {kind}"}
        return sum(p.least_s + got.scale * (p.full_s - p.least_s)
                   for p in parts(self.full, facts)
                   if p.name in mine and p.name not in got.dropped) - facts.plan_extra_s

    def settings(self, got: Fit, *names: str) -> dict[str, Any]:
        """The named settings at the fit's scale; noted where shortened."""
        values = scaled({n: self.full[n] for n in names}, got.scale)
        for n, v in values.items():
            if v < self.full[n]:
                prev = self.shortened.get(n, {}).get("to", v)
                self.shortened[n] = {"from": self.full[n], "to": min(prev, v)}
        return values

    def skip(self, part: str, instead: str) -> None:
        self.skipped.append(part)
        self.log(f"budget: skipping {part} ({instead})")

    def notes(self) -> dict[str, Any]:
        spent = self.clock() - self.start
        return {"seconds": round(self.seconds, 2), "spent": round(spent, 2),
                "skipped": list(self.skipped), "scaled": dict(self.shortened),
                "decisions": list(self.decisions)}


def summary(notes: Mapping[str, Any]) -> str:
    """One line on what a model's budget made the bench leave out or shorten."""
    text = f"budget {notes['seconds']:.1f} s, took {notes['spent']:.1f} s"
    if notes["spent"] > notes["seconds"]:
        text += f" (over by {notes['spent'] - notes['seconds']:.1f} s)"
    text += "; skipped: " + (", ".join(notes["skipped"]) or "nothing")
    if notes["scaled"]:
        text += "; shortened: " + ", ".join(
            f"{k} {_num(v['from'])} -> {_num(v['to'])}" for k, v in notes["scaled"].items())
    return text


def _num(x: float) -> str:
    return f"{x:g}"


def over(budget: Budget, settings, model: str, what: str, got) -> None:
    """A budget that cannot hold the required parts: an error where the budget is strict; else
    said, and the bench goes on at the minimums."""
    if settings.budget_strict:
        raise too_small(budget, model, what, got)
    budget.log(f"budget: {max(budget.left(), 0.0):.1f} s left cannot hold {what} (about "
               f"{got.least_s:.1f} s at the least): going on at the minimums, over budget")


def too_small(budget: Budget, model: str, what: str, got) -> BudgetError:
    return BudgetError(f"{budget.seconds:.1f} s of budget for {model} is too small: "
                       f"{max(budget.left(), 0.0):.1f} s were left for {what}, which need about "
                       f"{got.least_s:.1f} s at the least (estimated)")
