"""`hetflow bench`: profile (or reuse a profile), search plans, run baselines and plans side by
side in one process, and report throughput, latency, speed-ups and predicted vs measured."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from hetflow.errors import HetflowError
from hetflow.mapping.mapping import group_members
from hetflow.runtime.report import RunReport

from .budget import MINIMUMS, Budget, BudgetError, Facts, plan_extra, summary as budget_summary


# `bench --quick`: each model's budget unless --budget is given (the estimates it decides by are
# rough: 80 s keeps a model's bench within 90 s on the machines measured)
QUICK_MODEL_SECONDS = 80.0


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
    # likely to keep both in its full run (runtime/pilot.py `keep_chance`)
    balanced_rate_share: float | None = 0.9
    # a predicted latency is a median, the cap a p99: the balanced search keeps designs whose
    # predicted latency times this is within the cap (else, none being, within the cap itself).
    # Over runs 75-98 on the GPU machine (docs/results/lanes_h100), the full runs of
    # data-parallel designs with CPU members measured p50 1.00 and p99 1.47 times their a priori
    # predicted latency (medians of 87; the GPU alone 1.25 of 42)
    balanced_p99_over_predicted: float = 1.47
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


@dataclass
class ModelBench:
    model: str
    platform: str
    rows: list[dict[str, Any]]
    profile_seconds: float
    notes: dict[str, Any] = field(default_factory=dict)

    def to_dict(self):
        return dict(self.__dict__)


def cache_dir() -> Path:
    return Path(os.environ.get("HETFLOW_CACHE", Path.home() / ".cache" / "hetflow"))


def get_profile(graph, platform, repeats: int, log: Callable[[str], None]):
    """Reuse a cached profile made for this model and platform; else measure and cache it."""
    prof = cached_profile(graph, platform, log)
    return (prof, 0.0) if prof is not None else measure_profile(graph, platform, repeats, log)


def _profile_path(graph, platform) -> Path:
    return (cache_dir() / "profiles" /
            f"{graph.name}-{graph.model_hash[:12]}-{platform.platform_hash[:12]}.json")


def cached_profile(graph, platform, log: Callable[[str], None], partial: bool = False):
    """The cached profile made for this model and platform, or None; one that a time limit cut
    short (some element shapes not measured) only where `partial`."""
    from hetflow.profile.lanes import lanes_complete
    from hetflow.profile.profile import Profile

    path = _profile_path(graph, platform)
    if path.exists():
        try:
            prof = Profile.load(path)
            prof.check_matches(graph, platform)
            if prof.meta.get("partial") and not partial:
                return None
            gpus = [e.name for e in platform.all_elements() if e.kind == "gpu"
                    and e.name in prof.layer_times]
            cpus = [e.name for e in platform.all_elements() if e.kind == "cpu"
                    and e.backend != "none" and e.name in prof.layer_times]
            borders = prof.calibration.get("border_s", {})
            handoffs = all("handoff" in prof.comm.get(link, {}) for link in prof.comm_raw
                           if "gpu" in link)
            # else made before lanes, the firings' border costs, the GPU links' hand-offs,
            # lane counts past 8 or the engine's cost per firing were measured
            if (all(g in prof.gpu_lanes and lanes_complete(prof.gpu_lanes[g]) for g in gpus)
                    and all(c in borders for c in cpus) and handoffs
                    and "engine_firing_s" in prof.calibration):
                log(f"reusing profile {path}")
                return prof
        except HetflowError:
            pass
    return None


def profiled_elements(platform) -> list:
    from hetflow.mapping.from_profile import searched_elements

    return [e for e in searched_elements(platform) if e.backend != "none"]


def measure_profile(graph, platform, repeats: int, log: Callable[[str], None],
                    lane_seconds: float = 1.0, time_limit_s: float | None = None):
    """Measure the profile of this model on this platform and cache it: (profile, seconds).
    With `time_limit_s`, the baselines' element shapes come first and the others only while
    the limit holds (profile_model)."""
    from hetflow.profile import profile_model

    path = _profile_path(graph, platform)
    needed = profiled_elements(platform)
    log(f"profiling {graph.name} on {platform.name} ({len(graph.layers)} layers, "
        f"{len(needed)} elements)")
    t0 = time.perf_counter()
    singles, parallel = baseline_elements(platform)
    # no busy-copies run of its own: the bench's parallel baseline measures that load, longer
    prof = profile_model(graph, platform, elements=needed, repeats=repeats, progress=False,
                         contention=False,
                         lane_seconds=lane_seconds, time_limit_s=time_limit_s,
                         required=[e.name for e in (*singles, *parallel)])
    prof.save(path)
    log("profiled: " + ", ".join(f"{k} {v:.1f} s" for k, v in
                                 prof.meta.get("phase_seconds", {}).items())
        + f"; the engine's cost per firing {prof.engine_firing() * 1e6:.1f} us")
    for g, table in prof.gpu_lanes.items():
        if table.get("seconds"):
            log(f"lane table of {g}: " + ", ".join(f"{k} {v:.1f} s"
                                                   for k, v in table["seconds"].items()))
    if prof.meta.get("partial"):
        log(f"profile within {time_limit_s:.1f} s: the search leaves out the core groups "
            f"{', '.join(prof.meta['partial'])}")
    return prof, time.perf_counter() - t0


def baseline_elements(platform):
    """(peak-single candidates, parallel-copy elements) of a platform."""
    from hetflow.platform.configs import default_config, finest_config

    singles = [e for e in default_config(platform).elements if e.backend != "none"]
    parallel = [e for e in finest_config(platform).elements if e.backend != "none"]
    return singles, parallel


def _row(name: str, kind: str, r: RunReport, predicted: float | None = None,
         search_s: float | None = None, plan=None) -> dict[str, Any]:
    from hetflow.mapping.mapping import describe_design

    return {"name": name, "kind": kind, "throughput": r.throughput,
            "latency_p50": r.latency["p50"], "latency_p99": r.latency["p99"],
            "predicted_throughput": predicted, "search_seconds": search_s,
            "checked_frames": r.checked_frames, "max_abs_error": r.max_abs_error,
            "utilisation": r.utilisation,
            "stages": [a for a in plan.app.phases] if plan is not None else None,
            "design": (describe_design(plan.app.phases, plan.mapping.lanes) if plan is not None
                       else None),
            "lanes": ({e: k for e, k in plan.mapping.lanes.items() if k > 1} if plan is not None
                      else r.notes.get("lanes", {})),
            **({"interleave": plan.mapping.interleave}
               if plan is not None and plan.mapping.interleave else {})}


def bench_model(model: str, platform, settings: BenchSettings,
                log: Callable[[str], None] = lambda s: None, report_dir: Path | None = None
                ) -> ModelBench:
    """Profile (or reuse the cached profile), run the baselines, search, pilot and run each
    plan kind. Runners (sessions, CUDA graphs) are built once per model and reused by every
    measurement that runs the same layers on the same element."""
    from hetflow.backends.reuse import reusing_runners

    with reusing_runners() as runners:
        mb = _bench_model(model, platform, settings, log, report_dir)
        mb.notes["runners"] = {"built": runners.built, "reused": runners.reused}
    return mb


def _bench_model(model: str, platform, settings: BenchSettings, log: Callable[[str], None],
                 report_dir: Path | None) -> ModelBench:
    from hetflow.mapping.from_profile import problem_from_profile
    from hetflow.errors import InfeasibleError
    from hetflow.mapping.mapping import describe_design
    from hetflow.mapping.planner import is_copies_design, make_plan, search_candidates
    from hetflow.mapping.problem import evaluate
    from hetflow.model import resolve_model
    from hetflow.model.subnet import subnet_key
    from hetflow.platform.configs import distinct_elements
    from hetflow.profile import profile_subnets
    from hetflow.runtime.api import run_plan
    from hetflow.runtime.baselines import measure_parallel, measure_single
    from hetflow.runtime.inputs import random_source
    from hetflow.runtime.pilot import choose_by_pilot, frames_for

    t_start = time.perf_counter()
    timeline: list[list] = []  # [seconds since the start, what began then]: where time went
    outer_log = log

    def log(msg: str) -> None:
        t = time.perf_counter() - t_start
        timeline.append([round(t, 2), msg])
        outer_log(f"[{t:5.1f} s] {msg}")

    budget = (Budget(settings.budget_seconds, {k: getattr(settings, k) for k in MINIMUMS}, log)
              if settings.budget_seconds is not None else None)
    kinds = list(settings.strategies) + (["balanced"] if settings.balanced_latency_share
                                         is not None else [])
    graph = resolve_model(model, fuse=True)
    singles, parallel = baseline_elements(platform)
    prof, prof_s = cached_profile(graph, platform, log, partial=budget is not None), 0.0
    repeats, lane_s, limit_s = settings.profile_repeats, settings.lane_seconds, None
    build_s, overruns = 0.0, []  # a whole-model build; what plan kinds took beyond estimates
    needed = profiled_elements(platform) if budget is not None and prof is None else []
    if budget is not None and needed:
        gpus = sum(e.kind == "gpu" for e in needed)
        # the profile's cost, estimated from one frame on its slowest element (the runner is
        # kept for the profile and the baselines)
        build_s, frame_s = probe(graph, min(needed, key=lambda e: (e.kind != "cpu",
                                                                  len(e.cores))))
        # the baselines' element shapes are measured; the others while the time allows
        facts = Facts(frame_s, len(parallel) / frame_s, kinds, profile=True, baselines=True,
                      elements=len(distinct_elements([*singles, *parallel])), gpus=gpus,
                      build_s=build_s, copies=len(parallel) - gpus if gpus else 0,
                      references=gpus + (gpus > 0), pilots=settings.pilot_candidates,
                      refine=settings.refine, plan_extra_s=plan_extra(build_s, overruns))
        got = budget.decide("the profile", facts)
        if not got.ok:
            over(budget, settings, graph.name, "its profile and baselines", got)
        k = budget.settings(got, "profile_repeats", "lane_seconds")
        repeats, lane_s = int(k["profile_repeats"]), k["lane_seconds"]
        limit_s = max(0.0, budget.allowance(facts, got, "profile"))
    if prof is None:
        prof, prof_s = measure_profile(graph, platform, repeats, log, lane_s, limit_s)
    problem = problem_from_profile(graph, prof, platform, settings.capacity)
    source = random_source(graph)
    rows = []

    # a GPU runs at the lane count its profile found best (alone for the single element, beside
    # busy CPU copies for the parallel baseline); the one-lane figures stay as reference rows
    solo_lanes = {e.name: problem.best_lanes(e.name, busy=False) for e in singles
                  if e.name in problem.lane_slowdown}
    par_lanes = {e.name: problem.best_lanes(e.name, busy=True) for e in parallel
                 if e.name in problem.lane_slowdown}
    references = sum(k > 1 for k in solo_lanes.values()) + any(k > 1 for k in par_lanes.values())
    baseline_s = settings.baseline_seconds
    alone = {e: st["median"] for e, st in prof.whole_model.items() if e in problem.element_index}
    frame_s = max(alone.values(), default=0.01)
    if budget is not None:
        got = budget.decide("the baselines", Facts(
            frame_s, sum(1 / alone.get(e.name, frame_s) for e in parallel), kinds,
            baselines=True, references=references, pilots=settings.pilot_candidates,
            refine=settings.refine, plan_extra_s=plan_extra(build_s, overruns)))
        if not got.ok:
            what = "its baselines" + (f" (after its profile took {prof_s:.1f} s; the profile "
                                      f"is cached for the next bench)" if prof_s else "")
            over(budget, settings, graph.name, what, got)
        baseline_s = budget.settings(got, "baseline_seconds")["baseline_seconds"]
        if references and "reference rows (one lane)" in got.dropped:
            budget.skip("reference rows (one lane)", "the baselines run at their best lane "
                        "counts only")
            references = 0
    single_reports, reference = [], []
    for e in singles:
        best = solo_lanes.get(e.name, 1)
        for k in sorted({1, best}) if references else [best]:
            log(f"baseline: whole model on {e.name}" + (f", {k} lanes" if k > 1 else ""))
            r = measure_single(graph, e, source, warmup=5, seconds=baseline_s, lanes=k)
            (single_reports if k == best else reference).append(r)
    apply_single_baselines(problem, singles, solo_lanes, single_reports, log)
    best_single = max(single_reports, key=lambda r: r.throughput)
    rows.append(_row(f"peak single ({best_single.name.split(':', 1)[1]})", "baseline", best_single))
    rows += [_row(f"reference: single {r.name.split(':', 1)[1]}, 1 lane", "reference", r)
             for r in reference]
    log(f"baseline: parallel copies on {', '.join(e.name for e in parallel)}"
        + "".join(f", {e} x{k} lanes" for e, k in par_lanes.items() if k > 1))
    # the better of two passes: every prediction rests on this run's contention (a pass of
    # tiny_yolo_v2 on the H100 machine read the copies 1.9x and the GPU 2.1x slower than the
    # same copies a minute later), and a baseline read low flatters every plan against it
    passes = [measure_parallel(graph, parallel, source, warmup=5, seconds=baseline_s,
                               lanes=par_lanes) for _ in range(2)]
    par = max(passes, key=lambda r: r.throughput)
    par.notes["passes_fps"] = [r.throughput for r in passes]
    log("parallel copies: " + ", ".join(f"{r.throughput:.1f}" for r in passes)
        + " frames/s in two passes; the better one is the baseline")
    rows.append(_row("parallel copies" + "".join(f" ({e} x{k} lanes)" for e, k in
                                                 par_lanes.items() if k > 1), "baseline", par))
    if references and any(k > 1 for k in par_lanes.values()):
        log("reference: parallel copies with one lane per GPU")
        par1 = measure_parallel(graph, parallel, source, warmup=5, seconds=baseline_s,
                                name="parallel, 1 lane")
        rows.append(_row("reference: parallel copies, 1 lane per GPU", "reference", par1))
    factors: dict[str, float] = {}
    if settings.contention:
        factors = apply_parallel_baseline(prof, problem, par, par_lanes, log)
    # what the predictions rest on, kept with the results (prediction errors are read here)
    basis = {"contention_factors": factors,
             "lane_slowdown": {e: {str(k): v for k, v in c.items()}
                               for e, c in problem.lane_slowdown.items()},
             "lane_slowdown_busy": {e: {str(k): v for k, v in c.items()}
                                    for e, c in problem.lane_slowdown_busy.items()},
             "lane_alone_runs": {e: {str(k): v for k, v in c.items()}
                                 for e, c in problem.lane_alone_runs.items()},
             "whole_model_alone_s": alone,
             "parallel_per_element_fps": par.notes.get("per_element_fps", {})}

    plans = {}
    jobs = [(strategy, strategy, {}) for strategy in settings.strategies]
    if settings.balanced_latency_share is not None:
        cap = settings.balanced_latency_share * par.latency["p99"]
        jobs.append(("balanced", None, {"latency_cap": cap}))
    floor = (settings.balanced_rate_share * par.throughput
             if settings.balanced_rate_share is not None else None)
    whole = subnet_key(l.name for l in graph.layers)
    # mapping key -> pilot run, or the error it ended with (shared by the plan kinds)
    pilots: dict[tuple, RunReport | HetflowError] = {}
    # design -> (the plan kind whose run measured it, that run): kinds that chose the same design
    # share one run (not a pilot: a full run, so no best-of-noisy-samples bias)
    ran: dict[tuple, tuple[str, RunReport]] = {}
    search_s = 0.5  # before any search: a guess; then the longest search so far
    for i, (label, strategy, options) in enumerate(jobs):
        n_pilots, refine = settings.pilot_candidates, settings.refine
        repeats = settings.profile_repeats
        pilot_s, plan_s, under_load_s = (settings.pilot_seconds, settings.plan_seconds,
                                         settings.under_load_seconds)
        at_least, warmup = settings.frames, settings.warmup
        t_kind, expected = time.perf_counter(), None
        if budget is not None:
            facts = Facts(frame_s, par.throughput, kinds[i:], search_s=search_s,
                          pilots=n_pilots, piloted=bool(pilots), refine=refine,
                          plan_extra_s=plan_extra(build_s, overruns))
            got = budget.decide(f"plan {label}", facts)
            if f"plan {label}" in got.dropped and settings.budget_strict:
                budget.skip(f"plan {label}", "no time left for it")
                continue
            if n_pilots > 1 and f"pilots of {label}" in got.dropped:
                budget.skip(f"pilots of {label}", "the best predicted design runs unpiloted")
                n_pilots = 1
            if refine and f"re-timing of {label}" in got.dropped:
                budget.skip(f"re-timing of {label}", "its a priori prediction is all it gets")
                refine = False
            k = budget.settings(got, "plan_seconds", "frames", "warmup",
                                *(["pilot_seconds"] if n_pilots > 1 else []),
                                *(["profile_repeats", "under_load_seconds"] if refine else []))
            plan_s, at_least, warmup = k["plan_seconds"], int(k["frames"]), int(k["warmup"])
            pilot_s = k.get("pilot_seconds", pilot_s)
            repeats = int(k.get("profile_repeats", repeats))
            under_load_s = k.get("under_load_seconds", under_load_s)
            expected = budget.expected(facts, got, label)  # (skipped parts are in got.dropped)
        log(f"searching: {label}")
        kind_floor = floor if "latency_cap" in options else None  # the balanced plan's
        t_search = time.perf_counter()
        def search(opts: dict) -> list:
            return search_candidates(problem, [strategy] if strategy else settings.strategies,
                                     platform.name, n_pilots, settings.seed, True, opts, log,
                                     skip_unfit=strategy is None, rate_floor=kind_floor)

        try:
            if "latency_cap" in options:
                candidates = searched_under_tail(search, options, settings, log)
            else:
                candidates = search(options)
        except InfeasibleError as e:
            log(f"{label}: {e}")
            candidates = []
        search_s = max(search_s if i else 0.0, time.perf_counter() - t_search)
        if not candidates:
            rows.append({"name": f"hetflow {label}", "kind": "plan", "infeasible": True})
            continue
        problem, candidates = time_gpu_stages(graph, prof, problem, candidates, platform.name,
                                              lane_s, log)
        basis["stage_slowdown"] = {f"{e} {key}": {str(k): v for k, v in c.items()}
                                   for (e, key), c in problem.stage_slowdown.items()}
        plan, result, tried = choose_by_pilot(
            candidates, graph, pilot_s, options.get("latency_cap"), pilots, log,
            incumbent=lambda p: is_copies_design(problem, p.mapping),
            rate_floor=kind_floor)
        # (element, its phases) of every member of every actor of the plan
        placed = [(e, ps) for a, ps in plan.app.phases.items() for e in group_members(a)]
        a_priori = dict(plan.predicted)  # from the profile, before this plan's stages ran
        # the search's problem stays as profiled: a plan's re-timed stages refine that plan's
        # figure only, never the next strategy's a priori prediction of the same design
        refined = problem
        if refine:
            # time the plan's phases as whole sub-networks and predict again with those times
            groups = [(e, p.layers) for e, ps in placed for p in ps]
            profile_subnets(graph, platform, groups, profile=prof, repeats=repeats)
            # the fresh measurement wins, the profile's whole-model time included: a profile
            # taken earlier (or cached from a busier moment) can be far off; on the GPU machine
            # the two samples of one core's whole model differed by up to 38% minutes apart
            fresh = {(e, k): v["median"] for e, st in prof.subnet_times.items()
                     for k, v in st.items()}
            loaded_times: dict = {}
            if settings.under_load:
                from hetflow.profile.under_load import time_stages_together

                work = [(problem.element(e), [p.layers for p in ps]) for e, ps in placed]
                loaded = time_stages_together(graph, work, under_load_s)
                # one lane was timed; a GPU with several keeps its curve measured under load
                loaded_times = {k: v["median"] for k, v in loaded.items()
                                if plan.mapping.lanes_of(k[0]) == 1}
            refined = replace(problem, subnet_times={**problem.subnet_times, **fresh},
                              loaded_times=loaded_times)
            metrics = evaluate(refined, plan.mapping)
            plan = make_plan(refined, plan.mapping, metrics, plan.strategy, platform.name,
                             plan.search, True)
        plans[label] = plan
        stage_s = {f"{p.actor}:{p.index}@{e}": refined.actor_time(p.layers, e)
                   for e, ps in placed for p in ps}
        basis.setdefault("plan_stage_s", {})[label] = stage_s
        basis.setdefault("whole_model_in_problem_s", {}).update(
            {e: t for e, t in ((e, problem.subnet_times.get((e, whole))) for e in
                               problem.element_index) if t is not None})
        design = describe_design(plan.app.phases, plan.mapping.lanes)
        same = ran.get(plan.mapping.key())
        if same is not None:
            log(f"plan {label}: {design}, the design plan {same[0]} ran; its run is reused")
            r = same[1]
        else:
            log(f"running plan {label}: {design}")
            trace = Path(report_dir) / f"{graph.name}.{label}.trace.json" if report_dir else None
            frames = frames_for(plan, plan_s, at_least)
            r = run_plan(plan, graph, frames, max(warmup, frames // 10), check="first",
                         trace_path=trace)
            ran[plan.mapping.key()] = (label, r)
        if expected is not None:
            overruns.append(time.perf_counter() - t_kind - expected)
        rows.append(_row(f"hetflow {label}", "plan", r, a_priori["throughput"],
                         plan.search.get("seconds"), plan))
        rows[-1]["strategy"] = plan.strategy
        if same is not None:
            rows[-1]["run_of"] = same[0]  # the plan kind whose run these figures are
        rows[-1]["pilots"] = tried
        rows[-1]["predicted_latency"] = a_priori["latency"]
        # the bench feeds frames as fast as a plan takes them: the latency its run should show
        rows[-1]["predicted_latency_saturated"] = a_priori.get("latency_saturated")
        if refine:  # after timing this plan's own stages: not a prediction
            rows[-1]["refined_throughput"] = plan.predicted["throughput"]
            rows[-1]["refined_latency"] = plan.predicted["latency"]
        if report_dir is not None:
            plan.save(Path(report_dir) / f"{graph.name}.{label}.plan.json")
            if result is not None and len(result.front) > 1:
                from hetflow.mapping.pareto import write_front

                write_front(result, Path(report_dir) / f"{graph.name}.{label}.pareto.csv")
    par_fps, single_fps = par.throughput, best_single.throughput
    rows = [r for r in rows if not r.get("infeasible")] + [r for r in rows if r.get("infeasible")]
    for row in rows:
        if row.get("infeasible"):
            continue
        row["vs_parallel"] = row["throughput"] / par_fps
        row["vs_single"] = row["throughput"] / single_fps
        row["p99_vs_parallel"] = row["latency_p99"] / par.latency["p99"]
    notes: dict[str, Any] = {"layers": len(graph.layers),
                             "parallel_elements": [e.name for e in parallel],
                             "prediction_basis": basis}
    if budget is not None:
        notes["budget"] = budget.notes()
        log(budget_summary(notes["budget"]))
    ran_plans = [r for r in rows if r["kind"] == "plan" and not r.get("infeasible")]
    if settings.head_to_head > 0 and ran_plans:
        from .head_to_head import head_to_head

        best = best_throughput_row(ran_plans, log)
        label = best["name"].removeprefix("hetflow ")
        notes["head_to_head"] = {"plan": label, **head_to_head(
            plans[label], graph, parallel, par_lanes, source, settings.head_to_head,
            settings.plan_seconds, settings.frames, log=log)}
        log(head_to_head_line(notes["head_to_head"]))
        bal = next((r for r in ran_plans if r["name"] == "hetflow balanced"), None)
        if bal is not None and settings.balanced_latency_share is not None:
            # the balanced plan's pair (rate and p99, each against the copies') side by side
            # the same way: one run's p99 is too noisy a sample to judge a cap by
            if plans["balanced"].mapping.key() == plans[label].mapping.key():
                h = {**notes["head_to_head"], "run_of": label}
            else:
                log("head to head of the balanced plan:")
                h = head_to_head(plans["balanced"], graph, parallel, par_lanes, source,
                                 settings.head_to_head, settings.plan_seconds, settings.frames,
                                 log=log)
            notes["head_to_head_balanced"] = {
                **h, "plan": "balanced", "rate_floor": settings.balanced_rate_share,
                "latency_cap": settings.balanced_latency_share}
            log(head_to_head_line(notes["head_to_head_balanced"]))
    notes.update(seconds=round(time.perf_counter() - t_start, 2), timeline=timeline)
    return ModelBench(graph.name, platform.name, rows, prof_s, notes)


def searched_under_tail(search: Callable[[dict], list], options: dict, settings: BenchSettings,
                        log: Callable[[str], None]) -> list:
    """`search(options)` for designs whose predicted latency times
    `balanced_p99_over_predicted` keeps the latency cap, or, where none does, within the cap
    itself (the pilots then measure each design's p99 against the cap)."""
    from hetflow.errors import InfeasibleError

    tail = settings.balanced_p99_over_predicted
    if tail <= 1.0:
        return search(options)
    try:
        found = search({**options, "latency_cap": options["latency_cap"] / tail})
    except InfeasibleError:
        found = []
    if found:
        return found
    log(f"no design predicted {tail:.2f}x within the latency cap of "
        f"{options['latency_cap'] * 1e3:.2f} ms; searching within the cap itself")
    return search(options)


def run_label(row: dict) -> str:
    """The plan kind whose run a plan row's figures are: its own, or that of the plan with the
    same mapping (`run_of`). Design strings name stages and lanes, not cut points, so two
    pipelines over the same elements share a design string but not a run."""
    return row.get("run_of") or row["name"].removeprefix("hetflow ")


def pilot_rate(row: dict) -> float | None:
    """The pilot rate (frames/s) of the design a plan row ran: measured before its run."""
    return next((t.get("pilot_throughput") for t in row.get("pilots") or ()
                 if t.get("chosen")), None)


def best_throughput_row(ran_plans: list[dict], log: Callable[[str], None] = lambda m: None
                        ) -> dict:
    """The plan a bench runs head to head as its best throughput plan: the throughput plans'
    fastest in the bench's one sample, unless the balanced plan's design piloted more than
    `pilot.CHALLENGE` above that plan's design. The balanced search looks at designs the
    throughput searches' predictions rank too low to pilot (a GPU beside a few multi-core CPU
    groups: fewer threads beside the GPU's driving thread), and a pilot is a measurement made
    before either plan ran; the bench's one sample is not the choice (the better of two noisy
    samples is biased high)."""
    from hetflow.runtime.pilot import CHALLENGE

    throughput = [r for r in ran_plans if r["name"] != "hetflow balanced"]
    if not throughput:
        return ran_plans[0]
    best = max(throughput, key=lambda r: r["throughput"])
    bal = next((r for r in ran_plans if r["name"] == "hetflow balanced"), None)
    if bal is None or run_label(bal) == run_label(best):  # one mapping, one run: no choice
        return best
    ours, theirs = pilot_rate(best), pilot_rate(bal)
    if ours and theirs and theirs > CHALLENGE * ours:
        log(f"the balanced plan's design piloted {theirs:.0f} frames/s, {theirs / ours:.2f}x "
            f"plan {best['name'].removeprefix('hetflow ')}'s: it runs head to head as the "
            "best throughput plan")
        return bal
    return best


def head_to_head_line(h: dict) -> str:
    """One line of a bench's head to head (`head_to_head.head_to_head` plus the plan kind; for
    the balanced plan, its rate floor and latency cap as shares of the copies')."""
    rounds = h.get("round_ratios") or []
    spread = (f"; rounds {min(rounds):.3f}-{max(rounds):.3f}" if len(rounds) > 1 else "")
    interval = h.get("round_ratio_interval")
    if interval:
        spread += (f"; the rounds' median {interval[2]:.0%} within "
                   f"{interval[0]:.3f}-{interval[1]:.3f}")
    line = (f"head to head, {h['repeats']} rounds alternately: hetflow {h['plan']} "
            f"{h['plan_fps']:.1f} frames/s, parallel copies {h['copies_fps']:.1f}: "
            f"{h['ratio']:.3f}x (medians{spread})")
    if h.get("p99_ratio") is not None:
        line += (f"; p99 {h['plan_p99'] * 1e3:.2f} ms against {h['copies_p99'] * 1e3:.2f}: "
                 f"{h['p99_ratio']:.2f}x")
    if h.get("run_of"):
        line += f" (the design of plan {h['run_of']})"
    if h.get("latency_cap") is not None:
        kept = balanced_pair_kept(h)
        line += (f"; floor {h['rate_floor']:.2f}x and cap {h['latency_cap']:.2f}x: "
                 + ("both kept" if kept else "not kept"))
    return line


def balanced_pair_kept(h: dict) -> bool:
    """Whether a balanced plan's head to head kept its floor (rate share of the copies') and
    its cap (p99 share of the copies'), by the medians."""
    return (h["ratio"] >= (h.get("rate_floor") or 0.0)
            and h.get("p99_ratio") is not None and h["p99_ratio"] <= h["latency_cap"])


def time_gpu_stages(graph, prof, problem, candidates: list, platform_name: str, seconds: float,
                    log: Callable[[str], None]) -> tuple[Any, list]:
    """Time each GPU stage of the candidates that runs several lanes and is not the whole model
    (whose curve the profile has) at its lane count, alone, into `prof.stage_lanes`; return the
    problem with those stages' curves and one-lane times, and the candidates predicted again
    with it, best first. Still a prediction: a stage is timed alone, as the profile times
    layers, and no plan has run."""
    from hetflow.mapping.planner import make_plan
    from hetflow.mapping.problem import evaluate
    from hetflow.model.subnet import subnet_key
    from hetflow.profile.lanes import measure_stage_lanes, slowdown_curves

    whole = subnet_key(l.name for l in graph.layers)
    todo: dict[tuple[str, str], tuple[list[str], set[int]]] = {}
    for plan, _ in candidates:
        for actor, phases in plan.app.phases.items():
            for e in group_members(actor):
                k = problem.lanes_in(plan.mapping, e)
                if problem.element(e).kind != "gpu" or k <= 1:
                    continue
                for p in phases:
                    key = subnet_key(p.layers)
                    if key != whole and k not in problem.stage_slowdown.get((e, key), {}):
                        todo.setdefault((e, key), (list(p.layers), set()))[1].add(k)
    if not todo:
        return problem, candidates
    curves, times = dict(problem.stage_slowdown), dict(problem.subnet_times)
    for (e, key), (layers, ks) in todo.items():
        counts = sorted({1, *ks})
        log(f"timing a stage of {len(layers)} layers on {e} at "
            f"{', '.join(map(str, counts[:-1]))} and {counts[-1]} lanes")
        try:
            table = measure_stage_lanes(graph, layers, problem.element(e), counts, seconds)
        except HetflowError as err:  # its pilot, if any, fails the same way and says so
            log(f"timing that stage failed, its prediction keeps the whole model's curve: {err}")
            continue
        prof.stage_lanes.setdefault(e, {})[key] = table
        curves[(e, key)] = {**curves.get((e, key), {}), **slowdown_curves(table)[0]}
        times[(e, key)] = float(table["1"]["alone"]["median"])
    problem = replace(problem, stage_slowdown=curves, subnet_times=times)
    again = [(make_plan(problem, plan.mapping, evaluate(problem, plan.mapping), plan.strategy,
                        platform_name, plan.search, True), result) for plan, result in candidates]
    again.sort(key=lambda c: -c[0].predicted["throughput"])
    return problem, again


def over(budget: Budget, settings: BenchSettings, model: str, what: str, got) -> None:
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


def probe(graph, element) -> tuple[float, float]:
    """(seconds to build the whole model's runner on `element`, seconds of one frame there).
    Inside reusing_runners the runner is kept: the profile and the baselines take it again."""
    from contextlib import nullcontext

    from hetflow.backends import pinned
    from hetflow.backends.reuse import release, runners_for
    from hetflow.profile.measure import random_feeds, time_runner

    t0 = time.perf_counter()
    runner = runners_for(graph, [l.name for l in graph.layers], element)[0]
    build_s = time.perf_counter() - t0
    try:
        with pinned(runner.caller_cores) if runner.caller_cores else nullcontext():
            times = time_runner(runner, random_feeds(graph, graph.inputs), 3, 1,
                                end_to_end=True)
    finally:
        release([runner])
    return build_s, sorted(times)[1]


def apply_single_baselines(problem, singles, lanes: dict[str, int], reports,
                           log: Callable[[str], None]) -> None:
    """What the peak-single baselines measured of a GPU alone at several lanes, into `problem`
    (`lane_alone_runs`, `alone_lane_slowdown`) before anything is predicted; said in `log`."""
    from hetflow.mapping.from_profile import alone_lane_slowdown

    whole = [l.name for l in problem.graph.layers]
    for e, r in zip(singles, reports):
        k = lanes.get(e.name, 1)
        if k <= 1 or e.name not in problem.lane_slowdown or r.throughput <= 0:
            continue
        was = k / (problem.actor_time(whole, e.name) * problem.slowdown(e.name, k, busy=False))
        problem.lane_alone_runs.setdefault(e.name, {})[k] = alone_lane_slowdown(
            problem, e.name, k, r.throughput)
        log(f"{e.name} alone at {k} lanes: the baseline ran {r.throughput:.0f} frames/s, the "
            f"lane table read {was:.0f}; the curve takes the baseline's")


def apply_parallel_baseline(prof, problem, parallel_report, lanes: dict[str, int],
                            log: Callable[[str], None]) -> dict[str, float]:
    """What the parallel baseline measured, into `problem` before anything is predicted: the
    cores' contention factors and the GPUs' busy-curve scales (said in `log`). Returns the
    contention factors."""
    from hetflow.mapping.from_profile import busy_lane_scales, contention_factors

    rates = parallel_report.notes.get("per_element_fps", {})
    factors = contention_factors(prof, problem, rates)
    problem.apply_contention(factors)
    problem.lane_busy_scale.update(busy_lane_scales(problem, rates, lanes))
    log("contention factors: " + ", ".join(f"{k} {v:.2f}" for k, v in factors.items())
        + "".join(f"; {e} beside busy copies x{v:.2f}"
                  for e, v in problem.lane_busy_scale.items()))
    return factors
