"""A bench's baselines: the whole model on the best single element and copied on every element
at once. Besides their rows they are measurements the plans' cost model is calibrated with (a
GPU alone at its lanes, every element busy at once): `Baselines.calibration`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hetflow.profile.lanes import parse_batch_key
from hetflow.runtime.report import RunReport

from hetflow.bench.budget import Facts, plan_extra
from hetflow.bench.rows import run_row
from hetflow.bench.budget import over
from hetflow.bench.profiles import baseline_elements
from hetflow.runtime.baselines import measure_parallel, measure_single
from hetflow.runtime.energy import with_energy


@dataclass
class Baselines:
    rows: list[dict[str, Any]]
    best_single: RunReport
    parallel: RunReport
    parallel_lanes: dict[str, int]  # GPU element -> its lanes beside the busy copies
    parallel_batch: dict[str, int] = field(default_factory=dict)  # GPU element -> its b there
    # the same copies at batch 1 (where the parallel baseline batches): the latency a user has
    # today, which the balanced plan's cap is measured against
    batch1: RunReport | None = None
    # plain data for calibration.calibrate: "lanes_alone" and "contention" where measured
    calibration: dict[str, Any] = field(default_factory=dict)


def best_batch(prof, element: str, busy: bool = True) -> tuple[int, int] | None:
    """(b, k) of the highest rate (k x b frames a firing time) the profile's batch table
    measured for `element` (beside busy copies, else alone); None where it has none."""
    table = (getattr(prof, "gpu_batches", None) or {}).get(element, {})
    best = None
    for key, row in table.items():
        if "," not in key:  # the table's notes ("skipped", "seconds")
            continue
        b, k = parse_batch_key(key)
        st = row.get("busy" if busy else "alone") or row.get("alone") or {}
        t = st.get("median")
        if t and t > 0 and (best is None or k * b / t > best[0]):
            best = (k * b / t, b, k)
    return best[1:] if best else None


def batched_copies(prof, parallel, lanes: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(lanes, batch) of the practitioner's parallel design: each GPU among `parallel` at the
    (b, k) its profile measured best beside busy copies (`best_batch`), the others at `lanes`."""
    lanes, batch = dict(lanes), {}
    for e in parallel:
        bk = best_batch(prof, e.name) if e.kind == "gpu" else None
        if bk is not None and bk[0] > 1:
            batch[e.name], lanes[e.name] = bk
    return lanes, batch


def design_text(lanes: dict[str, int], batch: dict[str, int]) -> str:
    """' (gpu0 x2 b8)' for the elements run at more than one lane or frame a firing."""
    return "".join(f" ({e}" + (f" x{lanes.get(e, 1)}" if lanes.get(e, 1) > 1 else "")
                   + (f" b{batch[e]}" if batch.get(e, 1) > 1 else "") + ")"
                   for e in sorted(set(lanes) | set(batch))
                   if lanes.get(e, 1) > 1 or batch.get(e, 1) > 1)


def _decide(ctx, problem, prof, singles, parallel, references: int) -> tuple[float, int]:
    """(seconds per baseline run, one-lane reference rows) the budget allows."""

    alone = {e: st["median"] for e, st in prof.whole_model.items() if e in problem.element_index}
    frame_s = max(alone.values(), default=0.01)
    s, budget = ctx.settings, ctx.budget
    if budget is None:
        return s.baseline_seconds, references
    got = budget.decide("the baselines", Facts(
        frame_s, sum(1 / alone.get(e.name, frame_s) for e in parallel), ctx.kinds,
        baselines=True, references=references, pilots=s.pilot_candidates,
        refine=s.refine, plan_extra_s=plan_extra(ctx.build_s, ctx.overruns)))
    if not got.ok:
        what = "its baselines" + (f" (after its profile took {ctx.profile_s:.1f} s; the "
                                  f"profile is cached for the next bench)" if ctx.profile_s
                                  else "")
        over(budget, s, ctx.graph.name, what, got)
    if references and "reference rows (one lane)" in got.dropped:
        budget.skip("reference rows (one lane)", "the baselines run at their best lane "
                    "counts only")
        references = 0
    return budget.settings(got, "baseline_seconds")["baseline_seconds"], references


def run_baselines(ctx, problem, prof, source) -> Baselines:
    """Run the peak-single and parallel-copies baselines (and, where the budget allows, their
    one-lane references). A GPU runs at the lane count its profile found best: alone for the
    single element, beside busy CPU copies for the parallel baseline."""


    log, graph = ctx.log, ctx.graph
    singles, parallel = baseline_elements(ctx.platform)
    solo_lanes = {e.name: problem.best_lanes(e.name, busy=False) for e in singles
                  if e.name in problem.lane_slowdown}
    par_lanes = {e.name: problem.best_lanes(e.name, busy=True) for e in parallel
                 if e.name in problem.lane_slowdown}
    # the practitioner's design: a GPU at its best measured (b, k) beside the busy copies,
    # lanes alone where its profile has no batch table
    lanes1 = par_lanes  # the batch-1 copies' lanes
    par_lanes, par_batch = batched_copies(prof, parallel, lanes1)
    references = sum(k > 1 for k in solo_lanes.values()) + any(k > 1 for k in par_lanes.values())
    seconds, references = _decide(ctx, problem, prof, singles, parallel, references)
    single_reports, reference, lanes_alone = [], [], {}
    for e in singles:
        best = solo_lanes.get(e.name, 1)
        for k in sorted({1, best}) if references else [best]:
            log(f"baseline: whole model on {e.name}" + (f", {k} lanes" if k > 1 else ""))
            r = with_energy({e.name: e}, lambda: measure_single(
                graph, e, source, warmup=5, seconds=seconds, lanes=k))
            (single_reports if k == best else reference).append(r)
            if k == best and k > 1 and r.throughput > 0:
                lanes_alone.setdefault(e.name, {})[k] = r.throughput
    best_single = max(single_reports, key=lambda r: r.throughput)
    rows = [run_row(f"peak single ({best_single.name.split(':', 1)[1]})", "baseline",
                    best_single)]
    rows += [run_row(f"reference: single {r.name.split(':', 1)[1]}, 1 lane", "reference", r)
             for r in reference]
    elements = {e.name: e for e in parallel}
    log(f"baseline: parallel copies on {', '.join(e.name for e in parallel)}"
        + design_text(par_lanes, par_batch))
    # the better of two passes: every prediction rests on this run's contention (a pass read
    # the copies 1.9x and the GPU 2.1x slower than the same copies a minute later), and a
    # baseline read low flatters every plan against it
    passes = [with_energy(elements, lambda: measure_parallel(
        graph, parallel, source, warmup=5, seconds=seconds, lanes=par_lanes, batch=par_batch))
        for _ in range(2)]
    par = max(passes, key=lambda r: r.throughput)
    par.notes["passes_fps"] = [r.throughput for r in passes]
    log("parallel copies: " + ", ".join(f"{r.throughput:.1f}" for r in passes)
        + " frames/s in two passes; the better one is the baseline")
    rows.append(run_row("parallel copies" + design_text(par_lanes, par_batch), "baseline", par))
    batch1 = None
    if par_batch:  # the copies a user runs today, at batch 1: the balanced plan's cap's p99
        log("reference: parallel copies, batch 1")
        batch1 = with_energy(elements, lambda: measure_parallel(
            graph, parallel, source, warmup=5, seconds=seconds, lanes=lanes1,
            name="parallel, batch 1"))
        rows.append(run_row("reference: parallel copies, batch 1", "reference", batch1))
        par.notes["batch1_p99"] = batch1.latency["p99"]
        batch1.notes["batched_p99"] = par.latency["p99"]
    if references and any(k > 1 for k in par_lanes.values()):
        log("reference: parallel copies with one lane per GPU")
        par1 = with_energy(elements, lambda: measure_parallel(
            graph, parallel, source, warmup=5, seconds=seconds, name="parallel, 1 lane"))
        rows.append(run_row("reference: parallel copies, 1 lane per GPU", "reference", par1))
    calibration: dict[str, Any] = {"lanes_alone": lanes_alone} if lanes_alone else {}
    if ctx.settings.contention:
        calibration["contention"] = {
            "busy_fps": dict(par.notes.get("per_element_fps", {})), "busy_lanes": par_lanes,
            "busy_batch": par_batch, "source": "the bench's parallel baseline"}
    return Baselines(rows, best_single, par, par_lanes, parallel_batch=par_batch, batch1=batch1,
                     calibration=calibration)
