"""`hetflow bench`: `hetflow map` plus baselines, runs and a report. Per model: the profile
(reused from the cache, or measured), the baselines, the calibration of the cost model with
what they measured (`mapping.calibration`, saved beside the report so that `hetflow map
--calibration` plans from the same cost model), then per plan kind the search `map` does, the
pilots and the plan's run, the rows, and the head to head."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hetflow.rules import BALANCED_TAIL

from hetflow.bench.budget import MINIMUMS, Budget, Facts, over, plan_extra, summary as budget_summary
# the profile cache, imported from here by the other benches
from hetflow.bench.profiles import baseline_elements, cache_dir, cached_profile, expected_elements, get_profile, measure_profile, probe, screened_precisions
from hetflow.backends.reuse import reusing_runners
from hetflow.bench import plans
from hetflow.bench.baselines import run_baselines
from hetflow.bench.head_to_head import bench_head_to_head
from hetflow.bench.rows import compared
from hetflow.bench.precisions import (against_same_precision, precision_baselines,
                                      refused_precisions, with_precision_copies)
from hetflow.errors import InfeasibleError
from hetflow.mapping import pilot
from hetflow.mapping.calibration import calibrate
from hetflow.mapping.energy import energy_method
from hetflow.mapping.from_profile import problem_from_profile
from hetflow.mapping.planning import record_precision, search_kind
from hetflow.model import resolve_model
from hetflow.model.accuracy import Tolerance
from hetflow.platform.precision import DEFAULT_PRECISION
from hetflow.model.subnet import subnet_key
from hetflow.plan.mapping import group_members
from hetflow.runtime.inputs import random_source

__all__ = ["BenchSettings", "ModelBench", "bench_model", "cache_dir", "cached_profile",
           "get_profile"]


@dataclass
class BenchSettings:
    strategies: list[str] = field(default_factory=lambda: ["pipeline", "single"])
    frames: int = 200  # per plan run, at least; more to fill `plan_seconds` at the predicted rate
    warmup: int = 20
    plan_seconds: float = 2.0
    baseline_seconds: float = 3.0
    profile_repeats: int = 10
    lane_seconds: float = 1.0  # the profile's GPU lane table: per lane count, alone and busy
    capacity: int = 2
    seed: int = 0
    # after the plans: the best plan and the parallel copies run alternately this many times
    # each (`head_to_head`), then the balanced plan likewise, outside the budget; 0: not run
    head_to_head: int = 0
    refine: bool = True  # re-time the chosen plans' stages as whole sub-networks
    # ... and predict from the stages timed with all the plan's elements busy at once
    under_load: bool = True
    under_load_seconds: float = 2.0
    # also search a *balanced* plan: best throughput with predicted latency at most this share
    # of the parallel baseline's measured p99 (None: skip) ...
    balanced_latency_share: float | None = 0.5
    # ... and at least this share of the parallel baseline's rate: of the pilots, the one most
    # likely to keep both in its full run (mapping/pilot.py `keep_chance`)
    balanced_rate_share: float | None = 0.9
    # a predicted latency is a median, the cap a p99: the balanced search keeps designs whose
    # predicted latency times this is within the cap (else, none being, within the cap itself)
    balanced_p99_over_predicted: float = BALANCED_TAIL.value
    # scale profiled times by the slowdown each kind of element showed in the parallel baseline
    contention: bool = True
    # measure, then choose: run the best `pilot_candidates` designs by prediction for about
    # `pilot_seconds` each and keep the one that measured best (1: trust the prediction)
    pilot_candidates: int = 3
    pilot_seconds: float = 0.4
    # wall-clock seconds one bench_model call may take (None: no limit): it shortens the
    # measurements, then skips the least important parts, to fit (bench/budget.py); the CLI's
    # --budget gives each model an equal share of what is left
    budget_seconds: float | None = None
    # False: a budget too short for the profile and baselines at their minimums is not an error;
    # the bench goes on at the minimums, runs every plan kind, and says it went over
    budget_strict: bool = True
    # element precisions the search may choose among (`from_profile.precision_configurations`:
    # 'fp32', a setting such as 'gpu=fp16 cpu=int8', or 'auto'), within `tolerance` of the fp32
    # reference (None: `Tolerance()`); besides fp32, baselines run at each of them too
    precision: str = DEFAULT_PRECISION
    tolerance: Tolerance | None = None
    # frames a firing takes at most on any element, in the plans and the baselines alike
    # (`Profile.up_to_batch`; None: every batch the profile measured)
    max_batch: int | None = None


@dataclass
class ModelBench:
    model: str
    platform: str
    rows: list[dict[str, Any]]
    profile_seconds: float
    notes: dict[str, Any] = field(default_factory=dict)

    def to_dict(self):
        return dict(self.__dict__)


@dataclass
class Context:
    """What every step of one model's bench reads: the model, the platform, the settings, the
    budget, the log, and the costs the budget's estimates learn from as the bench goes."""
    graph: Any
    platform: Any
    settings: BenchSettings
    log: Callable[[str], None]
    budget: Budget | None
    report_dir: Path | None
    kinds: list[str]
    build_s: float = 0.0  # a whole-model runner's build
    profile_s: float = 0.0  # the profile's measurement (0: reused)
    frame_s: float = 0.01  # the slowest element's whole-model time
    overruns: list[float] = field(default_factory=list)  # plan kinds' seconds beyond estimates


def bench_model(model: str, platform, settings: BenchSettings,
                log: Callable[[str], None] = lambda s: None, report_dir: Path | None = None
                ) -> ModelBench:
    """Profile (or reuse the cached profile), run the baselines, calibrate, search, pilot and
    run each plan kind. Runners (sessions, CUDA graphs) are built once per model and reused by
    every measurement that runs the same layers on the same element."""

    with reusing_runners() as runners:
        mb = _bench_model(model, platform, settings, log, report_dir)
        mb.notes["runners"] = {"built": runners.built, "reused": runners.reused}
    return mb


def _bench_model(model: str, platform, settings: BenchSettings, log: Callable[[str], None],
                 report_dir: Path | None) -> ModelBench:


    t_start = time.perf_counter()
    timeline: list[list] = []  # [seconds since the start, what began then]: where time went

    def said(msg: str) -> None:
        t = time.perf_counter() - t_start
        timeline.append([round(t, 2), msg])
        log(f"[{t:5.1f} s] {msg}")

    budget = (Budget(settings.budget_seconds, {k: getattr(settings, k) for k in MINIMUMS}, said)
              if settings.budget_seconds is not None else None)
    kinds = list(settings.strategies) + (["balanced"] if settings.balanced_latency_share
                                         is not None else [])
    ctx = Context(resolve_model(model, fuse=True), platform, settings, said, budget, report_dir,
                  kinds)
    prof = bench_profile(ctx).up_to_batch(settings.max_batch)
    base = problem_from_profile(ctx.graph, prof, platform, settings.capacity,
                                precision=settings.precision, tolerance=settings.tolerance)
    alone = {e: st["median"] for e, st in prof.whole_model.items() if e in base.element_index}
    ctx.frame_s = max(alone.values(), default=0.01)
    source = random_source(ctx.graph)
    baselines = run_baselines(ctx, base, prof, source)
    # before the search: their GPUs' rates beside the busy cores calibrate the cost model too
    precision_rows, precision_busy = precision_baselines(ctx, base, prof, source,
                                                         settings.baseline_seconds)
    calibration = with_precision_copies(dict(baselines.calibration), precision_busy)
    problem, steps = calibrate(base, prof, calibration)
    for step in steps[1:]:
        said(step_line(step))
    basis = prediction_basis(problem, alone, baselines)
    kind_rows, plans = bench_kinds(ctx, prof, problem, steps, calibration, baselines, basis)
    rows = baselines.rows + precision_rows
    rows = against_same_precision(compared(rows + kind_rows, baselines.parallel,
                                           baselines.best_single))
    refused = refused_precisions(prof, settings.tolerance)
    notes: dict[str, Any] = {"layers": len(ctx.graph.layers),
                             **({"precisions_refused": refused} if refused else {}),
                             "parallel_elements": [e.name for e in
                                                   baseline_elements(platform)[1]],
                             "prediction_basis": basis}
    if budget is not None:
        notes["budget"] = budget.notes()
        said(budget_summary(notes["budget"]))
    notes.update(bench_head_to_head(ctx, rows, plans, baselines, source))
    notes["calibration"] = calibration
    if report_dir is not None:
        from hetflow.io import write_json

        write_json(Path(report_dir) / f"{ctx.graph.name}.calibration.json",
                   {"model": ctx.graph.name, "platform": platform.name, **calibration})
    notes.update(seconds=round(time.perf_counter() - t_start, 2), timeline=timeline)
    return ModelBench(ctx.graph.name, platform.name, rows, ctx.profile_s, notes)


def bench_profile(ctx: Context):
    """The cached profile of this model and platform, else one measured now (in the time the
    budget allows, the baselines' element shapes first) and cached."""
    graph, platform, settings, budget = ctx.graph, ctx.platform, ctx.settings, ctx.budget
    prof = cached_profile(graph, platform, ctx.log, partial=budget is not None,
                          precision=settings.precision, tolerance=settings.tolerance)
    if prof is not None:
        return prof
    repeats, lane_s, limit_s = settings.profile_repeats, settings.lane_seconds, None
    if budget is not None:
        from hetflow.platform.configs import distinct_elements

        needed = expected_elements(platform, settings.precision)
        singles, parallel = baseline_elements(platform)
        gpus = sum(e.kind == "gpu" for e in needed)
        # the profile's cost, estimated from one frame on its slowest element (the runner is
        # kept for the profile and the baselines)
        ctx.build_s, frame_s = probe(graph, min(needed, key=lambda e: (e.kind != "cpu",
                                                                      len(e.cores))))
        facts = Facts(frame_s, len(parallel) / frame_s, ctx.kinds, profile=True, baselines=True,
                      elements=len(distinct_elements([*singles, *parallel])), gpus=gpus,
                      build_s=ctx.build_s, copies=len(parallel) - gpus if gpus else 0,
                      references=gpus + (gpus > 0), pilots=settings.pilot_candidates,
                      refine=settings.refine, plan_extra_s=plan_extra(ctx.build_s, ctx.overruns),
                      screens=screened_precisions(needed, settings.precision))
        got = budget.decide("the profile", facts)
        if not got.ok:
            over(budget, settings, graph.name, "its profile and baselines", got)
        k = budget.settings(got, "profile_repeats", "lane_seconds")
        repeats, lane_s = int(k["profile_repeats"]), k["lane_seconds"]
        limit_s = max(0.0, budget.allowance(facts, got, "profile"))
    prof, ctx.profile_s = measure_profile(graph, platform, repeats, ctx.log, lane_s, limit_s,
                                          settings.precision, settings.tolerance)
    return prof


def step_line(step: dict) -> str:
    """One line of a calibration step as applied (`calibration.calibrate`'s record)."""
    if step["step"] == "contention":
        return ("contention factors: " + ", ".join(f"{k} {v:.2f}"
                                                   for k, v in step["factors"].items())
                + "".join(f"; {e} beside busy copies x{v:.2f}"
                          for e, v in step["busy_lane_scale"].items()))
    if step["step"] == "lanes_alone":
        return "lane curves from the peak-single baseline: " + ", ".join(
            f"{e} at {k} lanes {fps:.0f} frames/s" for e, per in step["frames_per_s"].items()
            for k, fps in per.items())
    return f"calibration step {step['step']}: " + ", ".join(
        f"{k} {v}" for k, v in step.items() if k != "step")


def prediction_basis(problem, alone: dict[str, float], baselines) -> dict[str, Any]:
    """What the predictions rest on, kept with the results (prediction errors are read here)."""
    def curves(table: dict) -> dict:
        return {e: {str(k): v for k, v in c.items()} for e, c in table.items()}

    return {"contention_factors": dict(problem.contention),
            "lane_slowdown": curves(problem.lane_slowdown),
            "lane_slowdown_busy": curves(problem.lane_slowdown_busy),
            "lane_alone_runs": curves(problem.lane_alone_runs),
            "whole_model_alone_s": alone,
            "parallel_per_element_fps": baselines.parallel.notes.get("per_element_fps", {})}


def bench_kinds(ctx: Context, prof, problem, steps: list[dict], calibration: dict, baselines,
                basis: dict) -> tuple[list[dict], dict]:
    """Each plan kind in turn (`plans.plan_kinds`): its rows and its plans by label. The
    search is `hetflow map`'s (`planning.search_kind`) on the calibrated cost model; GPU stages
    timed for one kind's candidates join the calibration of the kinds after it. A plan's
    re-timed stages refine that plan's figure only, never the next kind's search."""


    settings, log, graph = ctx.settings, ctx.log, ctx.graph
    shared, rows = plans.Shared(), []
    steps = list(steps)
    whole = subnet_key(l.name for l in graph.layers)
    for i, kind in enumerate(plans.plan_kinds(settings, baselines.parallel, baselines.batch1)):
        k = plans.kind_settings(ctx, i, kind, shared, baselines.parallel)
        if k is None:
            continue
        t_kind = time.perf_counter()
        log(f"searching: {kind.label}")
        try:
            candidates = search_kind(
                problem, kind.strategies, ctx.platform.name, k["pilots"], settings.seed, True,
                kind.options, log, rate_floor=kind.rate_floor, tail=kind.tail,
                skip_unfit=len(kind.strategies) > 1, calibration=steps)
        except InfeasibleError as e:
            log(f"{kind.label}: {e}")
            candidates = []
        shared.search_s = max(shared.search_s if i else 0.0, time.perf_counter() - t_kind)
        if not candidates:
            rows.append({"name": f"hetflow {kind.label}", "kind": "plan", "infeasible": True})
            continue
        problem, candidates, tables = plans.time_gpu_stages(
            graph, problem, candidates, ctx.platform.name, settings.lane_seconds, log)
        if tables:
            for e, per in tables.items():
                calibration.setdefault("stage_lanes", {}).setdefault(e, {}).update(per)
            steps = [t for t in steps if t["step"] != "stage_lanes"] + [
                {"step": "stage_lanes", "stages": sum(map(len, calibration["stage_lanes"]
                                                          .values()))}]
        basis["stage_slowdown"] = {f"{e} {key}": {str(n): v for n, v in c.items()}
                                   for (e, key), c in problem.stage_slowdown.items()}
        plan, result, tried = pilot.choose_plan(
            problem, candidates, graph, k["pilot_seconds"], kind.options.get("latency_cap"),
            kind.rate_floor, shared.pilots, log)
        plan.search["calibration"] = steps
        record_precision(plan, settings.precision, settings.tolerance)
        plan.predicted["energy_method"] = energy_method(problem, plan.mapping.elements)
        a_priori = dict(plan.predicted)  # from the profile, before this plan's stages ran
        used = problem
        if k["refine"]:
            plan, used = plans.refined(ctx, plan, problem, prof, k)
        shared.plans[kind.label] = plan
        placed = [(e, ps) for a, ps in plan.app.phases.items() for e in group_members(a)]
        basis.setdefault("plan_stage_s", {})[kind.label] = {
            f"{p.actor}:{p.index}@{e}": used.actor_time(p.layers, e) for e, ps in placed
            for p in ps}
        basis.setdefault("whole_model_in_problem_s", {}).update(
            {e: t for e, t in ((e, problem.subnet_times.get((e, whole)))
                               for e in problem.element_index) if t is not None})
        r, run_of = plans.run_chosen(ctx, kind.label, plan, shared, k)
        if k["expected"] is not None:
            ctx.overruns.append(time.perf_counter() - t_kind - k["expected"])
        rows.append(plans.plan_row(kind.label, plan, r, a_priori, run_of, tried, k["refine"]))
        if ctx.report_dir is not None:
            save_plan(ctx, kind.label, plan, result, problem)
    return rows, shared.plans


def save_plan(ctx: Context, label: str, plan, result, problem) -> None:
    """The plan, and its search's front where it has several designs, into the report."""
    plan.save(Path(ctx.report_dir) / f"{ctx.graph.name}.{label}.plan.json")
    if result is not None and len(result.front) > 1:
        from hetflow.mapping.pareto import write_front
        from hetflow.mapping.planner import fitted_front

        write_front(fitted_front(problem, result),
                    Path(ctx.report_dir) / f"{ctx.graph.name}.{label}.pareto.csv", problem)
