"""A bench's plan kinds (each strategy's plan, and the balanced plan): per kind, the search
`hetflow map` does (`planning.search_kind`), the GPU stages of its candidates timed at their
lanes (calibration step "stage lanes"), the pilots (`pilot.choose_plan`), the chosen plan's
stages re-timed (its refined figure) and its run."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hetflow.errors import HetflowError
from hetflow.plan.mapping import group_members
from hetflow.runtime.report import RunReport

from hetflow.bench.budget import Facts, plan_extra
from hetflow.bench.rows import run_row
from hetflow.mapping.calibration import with_retimed_stages, with_stage_lanes
from hetflow.mapping.pilot import frames_for
from hetflow.mapping.planner import make_plan
from hetflow.mapping.problem import evaluate
from hetflow.model.subnet import subnet_key
from hetflow.plan.mapping import describe_design
from hetflow.profile import profile_subnets
from hetflow.profile.lanes import measure_stage_lanes
from hetflow.runtime.api import run_plan


@dataclass
class Kind:
    label: str
    strategies: list[str]
    options: dict[str, Any]  # the search's options (the balanced plan's latency cap)
    rate_floor: float | None = None
    tail: float = 1.0  # the balanced plan's p99 over predicted latency (rules.BALANCED_TAIL)


@dataclass
class Shared:
    """What a model's plan kinds share: pilot runs and full runs by mapping key (kinds that
    chose one design share its run), the plans chosen, the longest search so far."""
    pilots: dict[tuple, RunReport | HetflowError] = field(default_factory=dict)
    ran: dict[tuple, tuple[str, RunReport]] = field(default_factory=dict)
    plans: dict[str, Any] = field(default_factory=dict)
    search_s: float = 0.5  # before any search: a guess


def plan_kinds(settings, parallel: RunReport, today: RunReport | None = None) -> list[Kind]:
    """Each strategy's kind, then the balanced kind: best throughput with its predicted
    latency within a share of the p99 of `today` (the batch-1 parallel copies, the latency a
    user has now; the parallel copies where none), at least a share of their rate."""
    today = today or parallel
    kinds = [Kind(s, [s], {}) for s in settings.strategies]
    if settings.balanced_latency_share is not None:
        floor = (settings.balanced_rate_share * parallel.throughput
                 if settings.balanced_rate_share is not None else None)
        kinds.append(Kind("balanced", list(settings.strategies),
                          {"latency_cap": settings.balanced_latency_share
                           * today.latency["p99"]},
                          floor, settings.balanced_p99_over_predicted))
    return kinds


def kind_settings(ctx, i: int, kind: Kind, shared: Shared, parallel: RunReport
                  ) -> dict[str, Any] | None:
    """The settings one plan kind runs with: the bench's, or what the budget leaves of them
    (with "expected": the seconds it should take); None: skipped for lack of time."""
    s, budget = ctx.settings, ctx.budget
    k = dict(pilots=s.pilot_candidates, refine=s.refine, profile_repeats=s.profile_repeats,
             pilot_seconds=s.pilot_seconds, plan_seconds=s.plan_seconds,
             under_load_seconds=s.under_load_seconds, frames=s.frames, warmup=s.warmup,
             expected=None)
    if budget is None:
        return k
    facts = Facts(ctx.frame_s, parallel.throughput, ctx.kinds[i:], search_s=shared.search_s,
                  pilots=k["pilots"], piloted=bool(shared.pilots), refine=k["refine"],
                  plan_extra_s=plan_extra(ctx.build_s, ctx.overruns))
    label = kind.label
    got = budget.decide(f"plan {label}", facts)
    if f"plan {label}" in got.dropped and s.budget_strict:
        budget.skip(f"plan {label}", "no time left for it")
        return None
    if k["pilots"] > 1 and f"pilots of {label}" in got.dropped:
        budget.skip(f"pilots of {label}", "the best predicted design runs unpiloted")
        k["pilots"] = 1
    if k["refine"] and f"re-timing of {label}" in got.dropped:
        budget.skip(f"re-timing of {label}", "its a priori prediction is all it gets")
        k["refine"] = False
    k.update(budget.settings(got, "plan_seconds", "frames", "warmup",
                             *(["pilot_seconds"] if k["pilots"] > 1 else []),
                             *(["profile_repeats", "under_load_seconds"] if k["refine"]
                               else [])))
    for name in ("frames", "warmup", "profile_repeats"):
        k[name] = int(k[name])
    k["expected"] = budget.expected(facts, got, label)  # (skipped parts are in got.dropped)
    return k


def measure_gpu_stages(graph, problem, candidates: list, seconds: float,
                       log: Callable[[str], None]) -> dict[str, dict[str, dict]]:
    """Lane tables ({element: {subnet key: table}}) of each GPU stage of the candidates that
    runs several lanes and is not the whole model (whose curve the profile has), timed alone
    at its lane counts. A stage that cannot be timed is left out (said in `log`): its
    prediction keeps the whole model's curve, and its pilot, if any, fails the same way."""

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
    tables: dict[str, dict[str, dict]] = {}
    for (e, key), (layers, ks) in todo.items():
        counts = sorted({1, *ks})
        log(f"timing a stage of {len(layers)} layers on {e} at "
            f"{', '.join(map(str, counts[:-1]))} and {counts[-1]} lanes")
        try:
            table = measure_stage_lanes(graph, layers, problem.element(e), counts, seconds)
        except HetflowError as err:
            log(f"timing that stage failed, its prediction keeps the whole model's curve: {err}")
            continue
        tables.setdefault(e, {})[key] = table
    return tables


def time_gpu_stages(graph, problem, candidates: list, platform_name: str, seconds: float,
                    log: Callable[[str], None]) -> tuple[Any, list, dict]:
    """`measure_gpu_stages`, then calibration step "stage lanes" with its tables: (the new
    problem, the candidates predicted again with it, best first, the tables). Still a
    prediction: a stage is timed alone, as the profile times layers, and no plan has run."""

    tables = measure_gpu_stages(graph, problem, candidates, seconds, log)
    if not tables:
        return problem, candidates, {}
    problem, _ = with_stage_lanes(problem, tables)
    again = [(make_plan(problem, plan.mapping, evaluate(problem, plan.mapping), plan.strategy,
                        platform_name, plan.search, True), result) for plan, result in candidates]
    again.sort(key=lambda c: -c[0].predicted["throughput"])
    return problem, again, tables


def refined(ctx, plan, problem, prof, k: dict) -> tuple[Any, Any]:
    """(the plan, predicted again from its own stages timed as whole sub-networks and, with
    `under_load`, with all its elements busy at once; the problem that prediction used). The
    fresh times win over the profile's: a profile taken earlier (or cached from a busier moment)
    can be far off."""

    placed = [(e, ps) for a, ps in plan.app.phases.items() for e in group_members(a)]
    groups = [(e, p.layers) for e, ps in placed for p in ps]
    profile_subnets(ctx.graph, ctx.platform, groups, list(plan.elements.values()), prof,
                    repeats=k["profile_repeats"])
    fresh = {(e, key): v["median"] for e, st in prof.subnet_times.items()
             for key, v in st.items()}
    loaded_times: dict = {}
    if ctx.settings.under_load:
        from hetflow.profile.under_load import time_stages_together

        work = [(problem.element(e), [p.layers for p in ps]) for e, ps in placed]
        loaded = time_stages_together(ctx.graph, work, k["under_load_seconds"])
        # one lane was timed; a GPU with several keeps its curve measured under load
        loaded_times = {key: v["median"] for key, v in loaded.items()
                        if plan.mapping.lanes_of(key[0]) == 1}
    again = with_retimed_stages(problem, fresh, loaded_times)
    plan = make_plan(again, plan.mapping, evaluate(again, plan.mapping), plan.strategy,
                     ctx.platform.name, plan.search, True)
    return plan, again


def run_chosen(ctx, label: str, plan, shared: Shared, k: dict) -> tuple[RunReport, str | None]:
    """The plan's run, checked: its own, or the run of the kind that chose the same design
    (whose label is returned with it)."""

    design = describe_design(plan.app.phases, plan.mapping.lanes, plan.mapping.batch)
    same = shared.ran.get(plan.mapping.key())
    if same is not None:
        ctx.log(f"plan {label}: {design}, the design plan {same[0]} ran; its run is reused")
        return same[1], same[0]
    ctx.log(f"running plan {label}: {design}")
    trace = (Path(ctx.report_dir) / f"{ctx.graph.name}.{label}.trace.json"
             if ctx.report_dir else None)
    frames = frames_for(plan, k["plan_seconds"], k["frames"])
    r = run_plan(plan, ctx.graph, frames, max(k["warmup"], frames // 10), check="first",
                 trace_path=trace, tolerance=ctx.settings.tolerance)
    shared.ran[plan.mapping.key()] = (label, r)
    return r, None


def plan_row(label: str, plan, r: RunReport, a_priori: dict, run_of: str | None,
             tried: list, refine: bool) -> dict[str, Any]:
    row = run_row(f"hetflow {label}", "plan", r, a_priori["throughput"],
                  plan.search.get("seconds"), plan)
    row["strategy"] = plan.strategy
    if run_of is not None:
        row["run_of"] = run_of  # the plan kind whose run these figures are
    row["pilots"] = tried
    row["predicted_latency"] = a_priori["latency"]
    # the bench feeds frames as fast as a plan takes them: the latency its run should show
    row["predicted_latency_saturated"] = a_priori.get("latency_saturated")
    row["predicted_joules_per_frame"] = a_priori.get("energy_per_frame")
    row["predicted_energy_method"] = a_priori.get("energy_method")
    if refine:  # after timing this plan's own stages: not a prediction
        row["refined_throughput"] = plan.predicted["throughput"]
        row["refined_latency"] = plan.predicted["latency"]
    return row
