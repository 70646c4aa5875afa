"""A bench's baselines at each precision the search may choose besides fp32: the peak single
element and the parallel copies with every element at that precision where it can run it (an
fp16 plan is compared with fp16 copies, not only with fp32 ones), and each row's precisions
and deviation from the fp32 reference."""
from __future__ import annotations

from typing import Any

from hetflow.model.accuracy import Tolerance, report_failures
from hetflow.platform.precision import DEFAULT_PRECISION, PRECISIONS_OF_KIND, with_precisions
from hetflow.profile.deviation import META_KEY, deviation_failures
from hetflow.runtime.baselines import measure_parallel, measure_single
from hetflow.runtime.energy import with_energy

from hetflow.bench.baselines import batched_copies, best_batch, design_text
from hetflow.bench.profiles import baseline_elements
from hetflow.bench.rows import run_row


def searched_precisions(problem) -> list[str]:
    """The precisions other than fp32 among the elements the search may use, in a fixed order."""
    found = {e.precision for e in problem.elements} - {DEFAULT_PRECISION}
    return sorted(found)


def at_precision(platform, precision: str):
    """`platform` with every GPU and cluster whose kind runs `precision` at it."""
    kinds = {"gpu": bool(platform.gpus), "cpu": bool(platform.clusters)}
    return with_precisions(platform, {k: precision for k, present in kinds.items()
                                      if present and precision in PRECISIONS_OF_KIND[k]})


def refused_precisions(prof, tolerance: Tolerance | None) -> dict[str, str]:
    """{element: why} of the elements that the profile checked at another precision than fp32
    and found outside `tolerance`: the search does not offer them (`precision_configurations`)."""
    tolerance = tolerance or Tolerance()
    out = {}
    for name in prof.meta.get(META_KEY, {}):
        failures = deviation_failures(prof, name, tolerance)
        if failures:
            out[name] = "; ".join(failures)
    return out


def recorded_deviation(prof, names, tolerance: Tolerance | None) -> dict[str, Any] | None:
    """The profile's check (`profile.deviation`) of the worst of the elements `names`, in the
    form of a run row's `deviation`: a baseline runs the whole model, which the profile checked."""
    records = [r for r in (prof.meta.get(META_KEY, {}).get(n) for n in names) if r]
    if not records:
        return None

    def worst(record: dict) -> float:
        rel = [o["rel_l2_worst"] for o in record["outputs"]]
        return float("inf") if None in rel else max(rel, default=0.0)

    record = max(records, key=worst)
    tolerance = tolerance or Tolerance()
    return {"frames": record["frames"], "inputs": "random frames (the profile's check)",
            "passed": not report_failures(record, tolerance), "tolerance": tolerance.to_dict(),
            "outputs": {o["name"]: {k: o[k] for k in ("rel_l2_worst", "max_abs_worst",
                                                      "top1_agreement")}
                        for o in record["outputs"]}}


def precision_baselines(ctx, problem, prof, source, seconds: float
                        ) -> tuple[list[dict[str, Any]], dict[str, dict]]:
    """Rows 'peak single @P' and 'parallel copies @P' for each precision P the search may
    choose besides fp32 (`searched_precisions`), with the deviation the profile's check found
    on their elements; an element the search may not use at P (its deviation missed the
    tolerance, or it was not profiled at P) stays out of P's copies. Also what the copies
    measured of each GPU element at P beside the busy cores, in the form of the calibration's
    "contention" step ({"busy_fps", "busy_lanes", "busy_batch"}: `mapping.calibration`)."""
    tolerance = ctx.settings.tolerance
    rows = []
    busy: dict[str, dict] = {"busy_fps": {}, "busy_lanes": {}, "busy_batch": {}}
    for p in searched_precisions(problem):
        singles, parallel = baseline_elements(at_precision(ctx.platform, p))
        singles = [e for e in singles if e.precision == p and e.name in problem.element_index]
        parallel = [e for e in parallel if e.name in problem.element_index]
        # as at fp32: a GPU at the (batch, lanes) its profile measured best at P, where it has
        # a batch table there (beside busy copies for the copies, alone for the single)
        lanes, batch = batched_copies(prof, parallel, {
            e.name: problem.best_lanes(e.name, busy=True) for e in parallel
            if e.name in problem.lane_slowdown})
        reports = []
        for e in singles:
            k = problem.best_lanes(e.name, busy=False) if e.name in problem.lane_slowdown else 1
            bk = best_batch(prof, e.name, busy=False) if e.kind == "gpu" else None
            b, k = bk if bk is not None and bk[0] > 1 else (1, k)
            ctx.log(f"baseline: whole model on {e.name}" + design_text({e.name: k}, {e.name: b}))
            reports.append(with_energy({e.name: e}, lambda: measure_single(
                ctx.graph, e, source, warmup=5, seconds=seconds, lanes=k, batch=b)))
        if reports:
            best = max(reports, key=lambda r: r.throughput)
            element = best.name.split(":", 1)[1]
            rows.append({**run_row(f"peak single @{p} ({element})", "baseline", best),
                         "precisions": [p], "precision_of": p,
                         "deviation": recorded_deviation(prof, [element], tolerance)})
        if parallel and any(e.precision == p for e in parallel):
            ctx.log(f"baseline: parallel copies @{p} on {', '.join(e.name for e in parallel)}"
                    + design_text(lanes, batch))
            r = with_energy({e.name: e for e in parallel}, lambda: measure_parallel(
                ctx.graph, parallel, source, warmup=5, seconds=seconds, lanes=lanes,
                batch=batch))
            rows.append({**run_row(f"parallel copies @{p}" + design_text(lanes, batch),
                                   "baseline", r),
                         "precisions": sorted({e.precision for e in parallel}),
                         "precision_of": p,
                         "deviation": recorded_deviation(prof, [e.name for e in parallel],
                                                         tolerance)})
            fps = r.notes.get("per_element_fps", {})
            for e in parallel:
                if e.kind == "gpu" and e.precision == p and fps.get(e.name):
                    busy["busy_fps"][e.name] = fps[e.name]
                    busy["busy_lanes"][e.name] = lanes.get(e.name, 1)
                    busy["busy_batch"][e.name] = batch.get(e.name, 1)
    return rows, busy


def with_precision_copies(calibration: dict[str, Any], busy: dict[str, dict]) -> dict[str, Any]:
    """`calibration` with the GPUs at other precisions, as their copies measured them beside
    the busy cores (`precision_baselines`), in its "contention" step beside the fp32 copies'
    elements: resnet18's fp16 copies on the H200 machine (the GPU beside 14 core copies) ran
    20,373 frames/s in all, where the fp16 GPU alone ran 26,712, which a plan batching it among
    core copies pays as well. Without that step (the bench's contention off), as it was."""
    if "contention" not in calibration or not busy.get("busy_fps"):
        return calibration
    step = dict(calibration["contention"])
    for key in ("busy_fps", "busy_lanes", "busy_batch"):
        step[key] = {**(step.get(key) or {}), **busy[key]}
    step["source"] = f"{step.get('source', 'the copies')}, and the copies at each precision"
    return {**calibration, "contention": step}


def against_same_precision(rows: list[dict]) -> list[dict]:
    """Each plan row that runs one precision besides fp32 with its rate over the parallel
    copies' at that precision (`vs_parallel_same_precision`)."""
    copies = {r["precision_of"]: r for r in rows
              if r.get("precision_of") and r["name"].startswith("parallel copies")}
    for row in rows:
        lowered = set(row.get("precisions") or ()) - {DEFAULT_PRECISION}
        if row.get("kind") == "plan" and not row.get("infeasible") and len(lowered) == 1:
            base = copies.get(lowered.pop())
            if base and base["throughput"] > 0:
                row["vs_parallel_same_precision"] = row["throughput"] / base["throughput"]
    return rows
