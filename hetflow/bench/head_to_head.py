"""A plan against the parallel copies, alternately: the ratio a drifting machine allows.

A bench measures its baselines once and each plan once, a minute apart; on the GPU machine the
same design reads 5-10% apart minutes apart, so a single "x parallel" cannot tell 0.95 from 1.05.
Run back to back and alternated, the drift falls on both sides alike: the median of each side
over `repeats` rounds, and their ratio. The order within a round alternates too (copies first in
even rounds, the plan first in odd ones): the second run of a pair follows the first's load, and
a side that always ran second would carry that alone.

Each run's p99 latency is kept as well: a balanced plan's claim is a pair (a rate and a p99,
each against the copies'), and a p99 of one run moves several times as far as its rate.
"""
from __future__ import annotations

import math
import statistics
from typing import Callable

from hetflow.plan.plan import Plan
from hetflow.model.graph import CnnGraph
from hetflow.bench.profiles import baseline_elements
from hetflow.bench.rows import best_throughput_row, head_to_head_line
from hetflow.mapping.pilot import frames_for
from hetflow.runtime.api import run_plan
from hetflow.runtime.baselines import measure_parallel


def head_to_head(plan: Plan, graph: CnnGraph, parallel: list, lanes: dict[str, int],
                 source: Callable[[int], dict], repeats: int = 3, seconds: float = 1.5,
                 at_least: int = 200, check: str = "none",
                 log: Callable[[str], None] = lambda msg: None,
                 batch: dict[str, int] | None = None) -> dict:
    """`plan` run by the engine and the whole model copied on every element of `parallel` (the
    GPUs at `lanes` and `batch`: the parallel baseline's design), alternately, `repeats` times each (the copies first in even rounds, the
    plan first in odd ones, and always the copies first for a plan without a prediction, whose
    run is as long as the copies' rate), about `seconds` a run: each side's runs, their
    medians, `ratio` = plan / copies and each round's ratio; the same of each run's p99
    (`p99_ratio`). `check`: the plan's reference check, as in `run_plan` (a failed check
    raises)."""

    plan_fps, copies_fps, plan_p99, copies_p99 = [], [], [], []
    plan_split: list[dict] = []
    copies_split: list[dict] = []

    def copies() -> None:
        r = measure_parallel(graph, parallel, source, warmup=5, seconds=seconds, lanes=lanes,
                             batch=batch or {})
        copies_fps.append(r.throughput)
        copies_p99.append(r.latency["p99"])
        copies_split.append(r.notes.get("per_element_fps", {}))

    def the_plan() -> None:
        # a plan without a prediction (one built by hand) runs as long at the copies' last rate
        frames = (frames_for(plan, seconds, at_least) if plan.predicted.get("throughput")
                  else max(at_least, int(copies_fps[-1] * seconds)))
        r = run_plan(plan, graph, frames, max(5, frames // 10), check=check)
        plan_fps.append(r.throughput)
        plan_p99.append(r.latency["p99"])
        plan_split.append(r.notes.get("per_element_fps", {}))

    for i in range(repeats):
        copies_first = i % 2 == 0 or not plan.predicted.get("throughput")
        log(f"head to head {i + 1}/{repeats}: "
            + ("the parallel copies, then the plan" if copies_first
               else "the plan, then the parallel copies"))
        for side in ((copies, the_plan) if copies_first else (the_plan, copies)):
            side()
    out = summary(plan_fps, copies_fps, plan_p99, copies_p99)
    out["plan_per_element_fps"] = median_split(plan_split)
    out["copies_per_element_fps"] = median_split(copies_split)
    return out


def median_interval(xs: list[float], level: float = 0.9) -> tuple[float, float, float] | None:
    """A distribution-free interval for the median of `xs` (lo, hi, its confidence): the
    order statistics x(k) and x(n-k+1) for the largest k that covers the median with at least
    `level` (each sample falls on either side of the median with chance 1/2, so the count
    below is Binomial(n, 1/2)). None with too few samples (five for 90%). Paired rounds of a
    head to head give the plan's ratio to the copies a precision: where the plan runs the
    copies' own design, an interval across 1.0 says the two are not told apart.
    """
    xs = sorted(xs)
    n = len(xs)
    k = 0
    while k + 1 <= n // 2 and 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n \
            <= 1 - level:
        k += 1
    if k == 0:
        return None
    confidence = 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n
    return xs[k - 1], xs[n - k], confidence


def median_split(runs: list[dict]) -> dict[str, float]:
    """Each element's median frames/s over `runs` (an element absent from a run counts 0
    there): which elements one side's lead or lag came from."""
    names = sorted({el for r in runs for el in r})
    return {el: statistics.median(r.get(el, 0.0) for r in runs) for el in names} if runs else {}


def summary(plan_fps: list[float], copies_fps: list[float], plan_p99: list[float] | None = None,
            copies_p99: list[float] | None = None) -> dict:
    """Each side's runs of alternate rounds, their medians and `ratio` = plan / copies; with
    each run's p99 (s), their medians and `p99_ratio` = plan / copies."""
    out = {"repeats": len(plan_fps), "plan_runs": plan_fps, "copies_runs": copies_fps,
           "plan_fps": statistics.median(plan_fps), "copies_fps": statistics.median(copies_fps),
           # each round's plan / copies: how far one side's lead holds from round to round
           "round_ratios": [p / c for p, c in zip(plan_fps, copies_fps)]}
    out["ratio"] = out["plan_fps"] / out["copies_fps"]
    interval = median_interval(out["round_ratios"])
    if interval is not None:
        out["round_ratio_interval"] = list(interval)
    if plan_p99 and copies_p99 and statistics.median(copies_p99) > 0:
        out.update(plan_p99_runs=plan_p99, copies_p99_runs=copies_p99,
                   plan_p99=statistics.median(plan_p99), copies_p99=statistics.median(copies_p99),
                   round_p99_ratios=[p / c for p, c in zip(plan_p99, copies_p99)])
        out["p99_ratio"] = out["plan_p99"] / out["copies_p99"]
    return out


def bench_head_to_head(ctx, rows: list[dict], plans: dict, baselines, source) -> dict:
    """A bench's head to head notes (none where `settings.head_to_head` is 0 or no plan ran):
    its best throughput plan against the parallel copies (`rows.best_throughput_row`), then the
    balanced plan likewise, with its rate floor and latency cap."""

    s, log = ctx.settings, ctx.log
    ran_plans = [r for r in rows if r["kind"] == "plan" and not r.get("infeasible")]
    if s.head_to_head <= 0 or not ran_plans:
        return {}
    parallel = baseline_elements(ctx.platform)[1]

    def against_copies(plan) -> dict:
        return head_to_head(plan, ctx.graph, parallel, baselines.parallel_lanes, source,
                            s.head_to_head, s.plan_seconds, s.frames, log=log,
                            batch=baselines.parallel_batch)

    best = best_throughput_row(ran_plans, log)
    label = best["name"].removeprefix("hetflow ")
    notes = {"head_to_head": {"plan": label, **against_copies(plans[label])}}
    log(head_to_head_line(notes["head_to_head"]))
    bal = next((r for r in ran_plans if r["name"] == "hetflow balanced"), None)
    if bal is not None and s.balanced_latency_share is not None:
        # the balanced plan's pair (rate and p99, each against the copies') side by side the
        # same way: one run's p99 is too noisy a sample to judge a cap by
        if plans["balanced"].mapping.key() == plans[label].mapping.key():
            h = {**notes["head_to_head"], "run_of": label}
        else:
            log("head to head of the balanced plan:")
            h = against_copies(plans["balanced"])
        notes["head_to_head_balanced"] = {
            **h, "plan": "balanced", "rate_floor": s.balanced_rate_share,
            "latency_cap": s.balanced_latency_share}
        log(head_to_head_line(notes["head_to_head_balanced"]))
    return notes
