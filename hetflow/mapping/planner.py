"""Search a mapping with a strategy and turn the best one into a Plan."""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from hetflow.mapping.interleaving import choose_interleave
from hetflow.plan.mapping import Mapping, group_members
from hetflow.plan.plan import Plan
from hetflow.mapping.problem import Metrics, Problem, build_app, saturated_latency
from hetflow.mapping.strategies.base import SearchResult, check_options, get_strategy
from hetflow.errors import DeadlockError, InfeasibleError
from hetflow.mapping.lanes import batchable, check_lanes, fit_lanes
from hetflow.mapping.pareto import front_designs, undominated
from hetflow.mapping.problem import evaluate
from hetflow.mapping.strategies.base import (
    configurations,
    group_name,
    strategy_options,
    whole_model_on,
)
from hetflow.mapping.strategies.single import weighted_group


def make_plan(problem: Problem, mapping: Mapping, metrics: Metrics, strategy: str,
              platform_name: str, search: dict | None = None, fuse: bool = False,
              latency_cap: float | None = None, splits: list | None = None,
              interleave: bool = True, rate_floor: float | None = None) -> Plan:
    """The plan of `mapping`; GPU elements get explicit lane counts (`fit_lanes`, with
    `rate_floor`: the fewest predicted above it) and, with `interleave`, actors whose frames
    leave and come back get frame-interleaved phase orders where the analysis finds them faster
    (`choose_interleave`; a mapping a search already interleaved keeps its orders, and the
    GPUs of its interleaved actors their one lane)."""

    mapping, fitted = as_fitted(problem, mapping, latency_cap, rate_floor)
    metrics = fitted or metrics
    if interleave and not any(b > 1 for b in mapping.batch.values()):  # batches: frame order
        mapping, chosen = choose_interleave(problem, mapping, latency_cap, plain=metrics)
        metrics = chosen or metrics
    check_lanes(problem, mapping)
    g = problem.graph
    app = build_app(problem, mapping)
    elements = {e: problem.element(e) for a in app.phases for e in group_members(a)}
    # what a run fed as fast as it goes will see, beside the latency of a paced stream
    saturated = saturated_latency(problem, mapping, app)
    predicted = {**metrics.to_dict(), "latency_saturated": saturated}
    return Plan(g.name, g.model_hash, g.source, platform_name, mapping, app, elements,
                problem.capacity_frames, predicted, strategy, search or {}, fuse,
                splits=list(splits or []))


def as_fitted(problem: Problem, mapping: Mapping, latency_cap: float | None = None,
              rate_floor: float | None = None) -> tuple[Mapping, Metrics | None]:
    """`mapping` with the lanes and batches its plan runs: one lane on the GPUs of its
    interleaved actors, the others fitted (`fit_lanes`); with its metrics (None where nothing
    was fitted)."""
    mapping = replace(mapping, lanes={**interleaved_lanes(problem, mapping), **mapping.lanes})
    return fit_lanes(problem, mapping, latency_cap, rate_floor=rate_floor)


def fitted_front(problem: Problem, result: SearchResult, latency_cap: float | None = None
                 ) -> list[tuple[Mapping, Metrics]]:
    """The designs of `result`'s front (`pareto.front_designs`) as plans run them: each with
    the lanes and batch its plan takes (`as_fitted`) and, for each element it may batch, at
    every other batch the profile measured (each at the fewest lanes near that batch's best),
    those within the latency cap that no other dominates. A strategy scores its GPUs at batch
    1; the batch trades the fill's latency for throughput and energy per frame, so a front of
    batch-1 scores hides the designs between."""
    problem = result.problem or problem
    out = []
    for mapping, _ in front_designs(result):
        variants = [mapping] + [
            replace(mapping, batch={**mapping.batch, e: b})
            for e in dict.fromkeys(mapping.elements)
            if batchable(problem, mapping, e) and e not in mapping.batch
            for b in problem.batch_sizes(e)]
        for variant in variants:
            try:
                m, fitted = as_fitted(problem, variant, latency_cap)
            except DeadlockError:  # a batch in a round trip (see fit_lanes)
                continue
            fitted = fitted or evaluate(problem, m)
            if latency_cap is None or fitted.latency <= latency_cap:
                out.append((m, fitted))
    return undominated(out) or front_designs(result)[:1]


def interleaved_lanes(problem: Problem, mapping: Mapping) -> dict[str, int]:
    """One lane for each GPU of `mapping`'s interleaved actors that `fit_lanes` would otherwise
    give lanes: an interleaved actor runs one frame at a time."""
    return {e: 1 for a in mapping.interleave for e in group_members(a)
            if e in problem.lane_slowdown}


def best_whole_model(problem: Problem, latency_cap: float | None = None
                     ) -> tuple[Mapping, Metrics] | None:
    """The whole model on the one element analysed fastest (a GPU at its best lanes and
    batch), among those within the latency cap; None where none is."""

    best = None
    for e in problem.elements:
        if not np.isfinite(problem.layer_times[:, problem.element_index[e.name]]).all():
            continue
        m, metrics = fit_lanes(problem, whole_model_on(problem, e.name), latency_cap)
        metrics = metrics or evaluate(problem, m)
        if latency_cap is not None and not metrics.latency <= latency_cap:
            continue
        if best is None or metrics.throughput > best[1].throughput:
            best = (m, metrics)
    return best


def measured_whole_models(problem: Problem, latency_cap: float | None = None
                          ) -> list[tuple[Mapping, Metrics]]:
    """The whole model alone on a GPU at each lane count a longer run measured
    (`Problem.lane_alone_runs`: the bench's peak-single baseline), within the latency cap: the
    design that run measured, beside the best count by the curve. With the baseline's point in
    the curve another count, read by the lane table alone, may look best (alexnet: 24 lanes ran
    7,701 frames/s as the baseline, 16 lanes were read at 8,796 and ran 6,156); the pilots
    then compare the two."""

    out = []
    for e, runs in problem.lane_alone_runs.items():
        for k in sorted(runs):
            m = replace(whole_model_on(problem, e), lanes={e: k})
            metrics = evaluate(problem, m)
            if latency_cap is None or metrics.latency <= latency_cap:
                out.append((m, metrics))
    return out


def copies_design(problem: Problem, latency_cap: float | None = None
                  ) -> tuple[Mapping, Metrics] | None:
    """The parallel copies' design: the whole model on a weighted group of every element of
    the configuration with the most elements (one copy per element, a GPU at the lanes and
    batch `fit_lanes` chooses beside the others), with its analysis; None where that
    configuration has one element, a member cannot run the whole model, or the design is
    predicted beyond the latency cap."""

    config = _finest_configuration(problem)
    if len(config) < 2:
        return None
    m, metrics = as_fitted(problem, weighted_group(problem, config), latency_cap)
    metrics = metrics or evaluate(problem, m)
    if not np.isfinite(metrics.throughput) or metrics.throughput <= 0:
        return None
    if latency_cap is not None and not metrics.latency <= latency_cap:
        return None
    return m, metrics


def is_copies_design(problem: Problem, mapping: Mapping) -> bool:
    """Whether `mapping` is `copies_design`'s (whatever its lane counts)."""

    config = _finest_configuration(problem)
    return len(config) > 1 and mapping.actors == [group_name(config)]


def _finest_configuration(problem: Problem) -> list[str]:
    """The configuration with the most elements (the first such): a platform's own list comes
    in its order, not by size (the 2-core VM lists its two-core group first)."""

    return max(configurations(problem), key=len)


def as_run(problem: Problem, result: SearchResult, latency_cap: float | None = None
           ) -> SearchResult:
    """`result` with its design as its plan runs it: with the frame-interleaved phase orders
    `choose_interleave` picks where they are faster (and within the latency cap), and their
    metrics; as it is where its strategy scored it so already (`scored_as_run`)."""
    if result.scored_as_run:
        return result
    mapping, chosen = choose_interleave(result.problem or problem, result.best, latency_cap,
                                        plain=result.metrics)
    if chosen is not None:
        result = replace(result, best=mapping, metrics=chosen)
    return replace(result, scored_as_run=True)


def against_whole_model(problem: Problem, result: SearchResult,
                        latency_cap: float | None = None) -> SearchResult:
    """`result`, or the whole model on one element where that is analysed faster (within the
    latency cap): no strategy may return a design worse than the obvious one (an ILP result
    was once analysed below the GPU alone). `result` comes as its plan runs it (`as_run`): a
    design with round trips is compared by its rate interleaved, not in frame order, which
    pays every round trip; and with the lanes and batches its plan will run (`as_fitted`), as
    the whole model is (a group of CPU copies and a GPU, scored at batch 1, gave way to the
    GPU alone batched where the group with the GPU batched was faster): where only the fitted
    design beats the whole model, it is returned fitted, with its metrics."""
    if result.notes.get("keep_design"):  # the user asked for this design (e.g. gp apply=always)
        return result
    best = best_whole_model(problem, latency_cap)
    if best is None or best[1].throughput <= result.metrics.throughput * (1 + 1e-9):
        return result
    fitted, own = as_fitted(result.problem or problem, result.best, latency_cap)
    if (own is not None and (latency_cap is None or own.latency <= latency_cap)
            and best[1].throughput <= own.throughput * (1 + 1e-9)):
        return replace(result, best=fitted, metrics=own)  # (its plan need not fit it again)
    return replace(result, best=best[0], metrics=best[1], problem=None, splits=[],
                   notes={**result.notes, "whole_model_won": (
                       f"the strategy's design was analysed at {result.metrics.throughput:.1f} "
                       f"frames/s, the whole model on {best[0].actors[0]} at "
                       f"{best[1].throughput:.1f}")})


def search_plan(problem: Problem, strategy: str, platform_name: str, seed: int = 0,
                fuse: bool = False, interleave: bool = True, **options
                ) -> tuple[Plan, SearchResult]:
    """The plan of `strategy`'s design: the search scores designs as their plans run them
    (with `interleave`, a design with round trips with its interleaved phase orders), and the
    whole model on its fastest element replaces a design analysed slower than it."""
    fn = get_strategy(strategy)
    check_options(strategy, options)
    cap = options.get("latency_cap")
    t0 = time.perf_counter()
    result = fn(problem, seed=seed, interleave=interleave, **options)
    if interleave:
        result = as_run(problem, result, cap)
    result = against_whole_model(problem, result, cap)
    seconds = time.perf_counter() - t0
    plan = make_plan(result.problem or problem, result.best, result.metrics, strategy,
                     platform_name,
                     {"seed": seed, "seconds": round(seconds, 3), "evaluations": result.evaluations,
                      "space_size": result.space_size, **{k: v for k, v in result.notes.items()
                                                          if isinstance(v, (int, float, str))}},
                     fuse, cap, result.splits, interleave and not result.scored_as_run)
    return plan, result


def search_candidates(problem: Problem, strategies: list[str], platform_name: str,
                      count: int = 3, seed: int = 0, fuse: bool = False,
                      options: dict | None = None, log=lambda msg: None,
                      skip_unfit: bool | None = None, interleave: bool = True,
                      rate_floor: float | None = None) -> list[tuple[Plan, SearchResult]]:
    """The best `count` designs by predicted throughput over `strategies` (each strategy's
    front; with a `latency_cap` option, only designs predicted within it), and every strategy's
    own pick, as (plan, search result) pairs, best prediction first. With several strategies, one
    that does not take an option is skipped (said in `log`); one that finds nothing feasible
    too (`skip_unfit`, default: with several strategies; else the error is raised). `count` 1:
    the best prediction over all strategies, as `search_plan` would give. Beside several
    candidates, the whole model on the element analysed fastest, the parallel copies' design
    (`copies_design`), the whole model on a GPU at a lane count a longer run measured
    (`measured_whole_models`) and, under a latency cap, the fastest design with room under it
    (`_roomy_designs`) are piloted too."""


    options = options or {}
    cap = options.get("latency_cap")
    skip_unfit = len(strategies) > 1 if skip_unfit is None else skip_unfit
    found = []  # (predicted throughput, order, plan, result)
    own_picks = []  # each strategy's own best design
    for name in strategies:
        lacking = sorted(set(options) - strategy_options(name, options))
        if lacking and skip_unfit:  # e.g. the balanced plan's latency cap
            log(f"{name}: takes no {', '.join(lacking)} option; not used for this plan")
            continue
        try:
            plan, result = search_plan(problem, name, platform_name, seed, fuse, interleave,
                                       **options)
        except InfeasibleError as e:
            if not skip_unfit:
                raise
            log(f"{name}: {e}")
            continue
        found.append((plan.predicted["throughput"], len(found), plan, result))
        own_picks.append((plan, result))
        cap = options.get("latency_cap")
        others = sorted(((mp, m) for mp, m in result.front if mp.key() != plan.mapping.key()
                         and (cap is None or m.latency <= cap)), key=lambda x: -x[1].throughput)
        for mp, m in others[:max(0, count - 1)]:
            alt = make_plan(problem, mp, m, name, platform_name, dict(plan.search), fuse, cap,
                            interleave=interleave)
            found.append((alt.predicted["throughput"], len(found), alt, result))
    found.sort(key=lambda x: (-x[0], x[1]))
    out, seen = [], set()
    for _, _, plan, result in found:
        if plan.mapping.key() not in seen and len(out) < max(1, count):
            seen.add(plan.mapping.key())
            out.append((plan, result))
    # every strategy's own pick is tried too: over-predicted designs of one strategy (pipelines
    # on the GPU machine, 1.1-1.5x) must not crowd out another's; and the whole model on the
    # best single element, a design of every strategy (on the H100, alexnet on the GPU alone at
    # 8 lanes ran 1.3x a GPU + 15-core design predicted above it; on the H200, GPU + CPU-replica
    # pipelines of mobilenet_v2 predicted 5,000-6,300 frames/s ran 2,700-3,000, the GPU alone
    # 5,700, and were the pipeline strategy's only candidates); and the parallel copies' design:
    # what a user would deploy without hetflow, and the pilots' incumbent (`choose_by_pilot`)
    obvious = [best_whole_model(problem, cap), copies_design(problem, cap),
               *measured_whole_models(problem, cap)] if found and count > 1 else []
    for design in (d for d in obvious if d is not None):
        first = found[0][2]
        own_picks.append((make_plan(problem, design[0], design[1], first.strategy, platform_name,
                                    dict(first.search), fuse, cap, interleave=interleave),
                          found[0][3]))
    for plan, result in own_picks:
        if plan.mapping.key() not in seen and count > 1:
            seen.add(plan.mapping.key())
            out.append((plan, result))
    # and the fastest with room under a latency cap that is not a candidate already (the
    # fastest predicted with room was once an over-predicted pipeline already piloted)
    floor = ROOMY_RATE * found[0][0] if found else 0.0  # the fastest prediction
    for (mp, m), plan, result in (_roomy_designs(found, cap, floor) if count > 1
                                  else [])[:ROOMY_TRIES]:
        roomy = make_plan(problem, mp, m, plan.strategy, platform_name, dict(plan.search), fuse,
                          cap, interleave=interleave)
        if roomy.mapping.key() not in seen:
            out.append((roomy, result))
            seen.add(roomy.mapping.key())
            break
    if rate_floor is not None and count > 1:
        out += _lean_lanes(problem, out, seen, platform_name, fuse, cap,
                           LEAN_MARGIN * rate_floor, interleave)
    return out


# A latency-capped plan with a rate floor (the bench's balanced plan: at least 0.9x the parallel
# copies' rate at no more than half their p99) needs no lanes past the floor: alexnet's GPU at
# 24 lanes, predicted well within the cap, piloted at 5.9 ms p99 and ran its full run at 22 ms
# (threads waiting for the one driving core) at 1.34x the copies' rate, where 8 lanes were
# predicted at 1.09x. The fewest lanes predicted this far above the floor (predictions of
# laned plans were within 15% of their runs) are offered beside the candidate; the pilots choose.
LEAN_MARGIN = 1.15
LEAN_TRIES = 2  # lean variants offered at most (each is one more pilot)


def _lean_lanes(problem: Problem, out: list, seen: set, platform_name: str, fuse: bool,
                cap: float | None, floor: float, interleave: bool) -> list:
    """The first `LEAN_TRIES` candidates of `out` that run GPU lanes or batches, again with
    each GPU's lanes and batch fitted to `floor` (`fit_lanes`), where that gives fewer frames
    in flight and a design not in `seen`."""

    extra = []
    for plan, result in list(out):
        m = plan.mapping
        if not any(m.lanes_of(e) * m.batch_of(e) > 1 for e in m.elements):
            continue
        fitted, metrics = fit_lanes(problem, replace(m, lanes=interleaved_lanes(problem, m),
                                                     batch={}), cap, rate_floor=floor)
        if metrics is None or any(fitted.lanes_of(e) * fitted.batch_of(e)
                                  > m.lanes_of(e) * m.batch_of(e) for e in m.elements):
            continue  # nothing fitted, or more frames in flight somewhere: not a leaner twin
        lean = make_plan(problem, fitted, metrics, plan.strategy, platform_name,
                         dict(plan.search), fuse, cap, interleave=interleave)
        if lean.mapping.key() not in seen:
            seen.add(lean.mapping.key())
            extra.append((lean, result))
        if len(extra) == LEAN_TRIES:
            break
    return extra


ROOMY_SHARE = 0.5  # the room a latency-capped search keeps for one candidate (see below)
ROOMY_TRIES = 8  # designs with room planned at most, looking for one not piloted already
# ... and predicted at least this share of the fastest candidate: a design with room that
# gives up the rate is no trade (one core alone once took the place)
ROOMY_RATE = 0.9


def _roomy_designs(found: list, cap: float | None, floor: float = 0.0) -> list:
    """Under a latency cap, the data-parallel designs (the whole model on one element or
    group) predicted within `ROOMY_SHARE` of it and at least `floor` frames/s, fastest
    predicted first, as ((mapping, metrics), a plan of its strategy, its result); [] without a
    cap. The candidates nearest the cap are the fastest predicted, but a predicted latency is a
    frame's typical one: the measured p99 of data-parallel designs with CPU core groups on the
    GPU machine was 1.2-2.3x it (a frame waits behind a slow member's), so those candidates can
    all miss the cap when run while a design with larger groups keeps it at nearly the same
    rate. (GPU + CPU-replica pipelines, predicted low in latency, are over-predicted in rate
    there: they already come in as candidates, and took this place in one run.)"""
    if cap is None:
        return []
    out, seen = [], set()
    for _, _, plan, result in found:
        if id(result) in seen:
            continue
        seen.add(id(result))
        out += [((mp, m), plan, result) for mp, m in result.front
                if len(mp.actors) == 1 and m.latency <= cap * ROOMY_SHARE
                and m.throughput >= floor]
    return sorted(out, key=lambda x: -x[0][1].throughput)


def describe_stages(plan: Plan, problem: Problem | None = None) -> list[dict]:
    rows = []
    stage_times = plan.predicted.get("stage_times", {})
    util = plan.predicted.get("utilisation", {})
    for actor, phases in plan.app.phases.items():
        layers = [l for p in phases for l in p.layers]
        rows.append({"actor": actor, "elements": list(group_members(actor)),
                     "lanes": {e: plan.mapping.lanes_of(e) for e in group_members(actor)
                               if plan.mapping.lanes_of(e) > 1},
                     "batch": {e: plan.mapping.batch_of(e) for e in group_members(actor)
                               if plan.mapping.batch_of(e) > 1},
                     "phases": len(phases), "interleave": plan.mapping.interleave.get(actor),
                     "layers": len(layers), "first": layers[0],
                     "last": layers[-1], "busy_s": stage_times.get(actor),
                     "utilisation": max((util.get(e, 0.0) for e in group_members(actor)), default=0.0)})
    return rows
