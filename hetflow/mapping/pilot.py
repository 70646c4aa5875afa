"""Measure, then choose: run candidate plans briefly on this machine and keep the best measured.

A model good to 10% still ranks designs wrongly when they are within 10% of each other, and a
systematic error in one kind of design (GPU/CPU pipelines were predicted 1.1-1.5x high on the
GPU machine) makes a search prefer that kind. `hetflow bench` and `hetflow map --pilots N` run
the best few designs by prediction for a moment each and keep the one that measured best.
"""
from __future__ import annotations

import math
import statistics
from typing import Any, Callable

from hetflow.errors import HetflowError
from hetflow.plan.mapping import describe_design
from hetflow.plan.plan import Plan
from hetflow.model.graph import CnnGraph
from hetflow.rules import (PILOT_CHALLENGE, PILOT_P99_DRIFT, PILOT_P99_SPREAD, PILOT_RATE_DRIFT,
                           PILOT_RATE_SPREAD, PILOT_ROOM, PILOT_SAME_RATE)

from hetflow.runtime.report import RunReport
from hetflow.mapping.planner import is_copies_design
from hetflow.runtime.api import run_plan


def frames_for(plan: Plan, seconds: float, at_least: int, at_most: int = 20000,
               firings: float = 4.0) -> int:
    """Frames for a run of about `seconds` at the plan's predicted rate, and at least long
    enough for `firings` frames' predicted latency: a fixed count is over before a slow
    member's first frame comes back when a GPU beside it runs 2,000 frames/s, and a run
    shorter than a few of a slow member's firings measures the bursts that its in-order
    release lets out (vgg19 with single-core CPU members piloted at 2,600 frames/s for a
    design that runs 700)."""
    thr = plan.predicted.get("throughput") or 0.0
    lat = plan.predicted.get("latency") or 0.0
    span = max(seconds, firings * lat if lat == lat else 0.0)
    return int(min(at_most, max(at_least, thr * span if thr == thr else 0)))


def choose_by_pilot(candidates: list[tuple[Plan, Any]], graph: CnnGraph | None,
                    seconds: float = 0.4, latency_cap: float | None = None,
                    pilots: dict[tuple, RunReport | HetflowError] | None = None,
                    log: Callable[[str], None] = lambda msg: None,
                    incumbent: Callable[[Plan], bool] | None = None,
                    rate_floor: float | None = None) -> tuple[Plan, Any, list[dict]]:
    """Run each candidate for about `seconds` (once per mapping: `pilots` caches the runs by
    mapping key) and return (plan, its search result, what was tried): the highest measured
    throughput wins, among those whose measured p99 keeps `latency_cap` if any does (else the
    lowest p99; `_pick`); with a `rate_floor` too, the one most likely to keep both in its
    full run (each pilot's chance is kept as `keep_chance`). Without a cap, the `incumbent`
    design (the parallel copies') keeps its place unless another pilot beats it by more than
    the pilots' noise. A design that fails its pilot is listed with its error; the others still
    compete. Report the winner from a fresh run, not from its pilot: the best of several noisy
    samples is biased high. One candidate: nothing is run."""

    if len(candidates) == 1:
        return (*candidates[0], [])
    pilots = {} if pilots is None else pilots
    tried = []
    for plan, _ in candidates:
        key = plan.mapping.key()
        if key not in pilots:
            log(f"pilot: {describe_design(plan.app.phases, plan.mapping.lanes, plan.mapping.batch)} (predicted "
                f"{plan.predicted['throughput']:.0f} fps)")
            frames = frames_for(plan, seconds, 60)
            try:
                pilots[key] = run_plan(plan, graph, frames, max(10, frames // 10), check="none")
            except HetflowError as e:
                pilots[key] = e
                log(f"pilot failed: {e}")
        r = pilots[key]
        t = {"stages": list(plan.app.phases), "strategy": plan.strategy,
             "design": describe_design(plan.app.phases, plan.mapping.lanes, plan.mapping.batch),
             "lanes": {e: k for e, k in plan.mapping.lanes.items() if k > 1},
             "cores": cores_used(plan),
             "predicted_throughput": plan.predicted["throughput"],
             "predicted_latency": plan.predicted["latency"]}
        if isinstance(r, HetflowError):
            t["pilot_error"] = str(r)
        else:
            t.update(pilot_throughput=r.throughput, pilot_latency_p99=r.latency["p99"])
        tried.append(t)
    ran = [i for i, t in enumerate(tried) if "pilot_error" not in t]
    if not ran:
        raise pilots[candidates[0][0].mapping.key()]
    held = next((i for i in ran if incumbent is not None and incumbent(candidates[i][0])), None)
    pick = _pick(tried, ran, latency_cap, held, rate_floor)
    tried[pick]["chosen"] = True
    if rate_floor is not None and latency_cap is not None:
        for i in ran:
            tried[i]["keep_chance"] = round(keep_chance(
                tried[i]["pilot_throughput"], tried[i]["pilot_latency_p99"], rate_floor,
                latency_cap)[0], 3)
    return (*candidates[pick], tried)


# A pilot is one noisy sample: the margins and spreads it is read with are measured rules
# (hetflow/rules.py says how each was measured).
def keep_chance(rate: float, p99: float, floor: float, cap: float) -> tuple[float, float]:
    """The chance that a design piloted at `rate` frames/s and `p99` s keeps both `floor` and
    `cap` in its full run, its reading moving as pilots' readings moved (log-normal, the two
    independent); and the smaller of its two margins in spreads, which still orders designs
    whose chance is nil."""
    z_rate = ((math.log(rate / floor) + PILOT_RATE_DRIFT.value) / PILOT_RATE_SPREAD.value
              if rate > 0 else -math.inf)
    z_p99 = ((math.log(cap / p99) - PILOT_P99_DRIFT.value) / PILOT_P99_SPREAD.value
             if p99 > 0 else math.inf)
    return _NORMAL.cdf(z_rate) * _NORMAL.cdf(z_p99), min(z_rate, z_p99)


_NORMAL = statistics.NormalDist()


def cores_used(plan) -> int | None:
    """How many cores a plan's elements hold (a GPU: its driving cores); None if unknown."""
    elements = getattr(plan, "elements", None)
    if not elements:
        return None
    return len({c for e in set(plan.mapping.elements) for c in elements[e].cores})


def _pick(tried: list[dict], ran: list[int], latency_cap: float | None,
          incumbent: int | None = None, rate_floor: float | None = None) -> int:
    """The index chosen among the pilots that ran.
    Without a cap: the highest throughput, the `incumbent` staying unless beaten by
    `PILOT_CHALLENGE`. Cores buy no place: a design on fewer cores that piloted within noise of
    a faster one ran below the copies head to head more often than not.
    Under a cap: the highest throughput within it (preferring one with room under it,
    `PILOT_ROOM`, at nearly the same rate, `PILOT_SAME_RATE`), else the lowest p99. With a
    `rate_floor` too: the pilot most likely to keep both in its full run (`keep_chance`).
    Fewer lanes buy no place there: a GPU's full run at many lanes stayed far under caps its
    pilot kept, and choosing fewer lanes for their room cost rate against the floor."""
    def rate(i: int) -> float:
        return tried[i]["pilot_throughput"]

    def p99(i: int) -> float:
        return tried[i]["pilot_latency_p99"]

    if latency_cap is None:
        best = max(ran, key=rate)
        if incumbent is not None and rate(best) < PILOT_CHALLENGE.value * rate(incumbent):
            best = incumbent
        return best
    if rate_floor is not None:
        # ties (chances that underflow to zero far from the floor) go to the faster, then the
        # lower p99: never to a pilot another beat on both counts
        return max(ran, key=lambda i: (keep_chance(rate(i), p99(i), rate_floor, latency_cap),
                                       rate(i), -p99(i)))
    ok = [i for i in ran if p99(i) <= latency_cap]
    if not ok:
        return min(ran, key=p99)
    best = max(ok, key=rate)
    roomy = [i for i in ok if p99(i) <= PILOT_ROOM.value * latency_cap
             and rate(i) >= PILOT_SAME_RATE.value * rate(best)]
    return max(roomy, key=rate) if roomy else best


def choose_plan(problem, candidates: list[tuple[Plan, Any]], graph: CnnGraph | None,
                seconds: float = 0.4, latency_cap: float | None = None,
                rate_floor: float | None = None,
                pilots: dict[tuple, RunReport | HetflowError] | None = None,
                log: Callable[[str], None] = lambda msg: None) -> tuple[Plan, Any, list[dict]]:
    """The plan `hetflow map --pilots N` and `hetflow bench` keep of the candidates a search
    gave (`planning.search_kind`): `choose_by_pilot` with the parallel copies' design as the
    incumbent; one candidate: that one, nothing run."""

    return choose_by_pilot(candidates, graph, seconds, latency_cap, pilots, log,
                           incumbent=lambda p: is_copies_design(problem, p.mapping),
                           rate_floor=rate_floor)


def pilot_summary(tried: list[dict]) -> str:
    """One line: the design chosen by its pilot run, and the others tried."""
    def one(p: dict) -> str:
        got = (f"error: {p['pilot_error']}" if "pilot_error" in p else
               f"{p['pilot_throughput']:.1f} fps, p99 {p['pilot_latency_p99'] * 1e3:.1f} ms"
               + (f", chance to keep floor and cap {p['keep_chance']:.2f}"
                  if "keep_chance" in p else ""))
        return (f"{p.get('design') or ' + '.join(p['stages'])} "
                f"(predicted {p['predicted_throughput']:.1f} fps, "
                f"pilot {got})")

    chosen = [p for p in tried if p.get("chosen")]
    others = [p for p in tried if not p.get("chosen")]
    return ("chose " + "; ".join(one(p) for p in chosen)
            + (" over " + "; ".join(one(p) for p in others) if others else ""))
