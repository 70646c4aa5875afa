"""Calibration: named steps that correct the cost model a profile gives with later measurements.

Each step is a pure function: a `Problem` and plain measurements in, a new `Problem` out
(`dataclasses.replace`; the one given is left as it was, and its cached properties with it).
The measurements are plain JSON data (a `Calibration` dict), so that what a bench measured can
be saved beside its report and `hetflow map --calibration FILE` applies the same steps to the
same profile, giving the same cost model:

    {"lanes_alone": {element: {lanes: frames/s}},        # a GPU alone at k lanes, a longer run
     "contention":  {"busy_fps": {element: frames/s},    # every element busy with a copy
                     "busy_lanes": {element: lanes},     # a GPU's lanes and batch there
                     "busy_batch": {element: b}, "source": "..."},
     "stage_lanes": {element: {subnet key: lane table}}} # GPU stages timed at their lanes

`calibrate` applies the steps in that order (the order `hetflow bench` measures them in) and
returns the list of steps it applied, with a summary of each one's inputs, for the plan. A bench
times GPU stages as its searches find them: a plan kind searched before a stage was timed did
not have its lanes, which `map` given the whole calibration has from the start.
"""
from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

import numpy as np

from hetflow.mapping.problem import Problem
import json
from hetflow.errors import InputError
from hetflow.profile.lanes import slowdown_curves
from pathlib import Path

Calibration = dict[str, Any]

ORDER = ("lanes_alone", "contention", "stage_lanes")


def _whole(problem: Problem) -> list[str]:
    return [l.name for l in problem.graph.layers]


# ---- contention: every element busy at once ----

def busy_slowdowns(profile, busy_fps: dict[str, float], skip=()) -> dict[str, float]:
    """{element: its time per frame while every element ran a whole-model copy (1 / its rate in
    `busy_fps`) over its time alone (the profile's whole model)}, for the elements with both,
    less those in `skip`."""
    out = {}
    for el, fps in busy_fps.items():
        alone = profile.whole_model.get(el, {}).get("median")
        if el not in skip and fps > 0 and alone:
            out[el] = (1.0 / fps) / alone
    return out


def contention_factors(profile, problem: Problem, busy_fps: dict[str, float]) -> dict[str, float]:
    """Per element of `problem`: its `busy_slowdowns`, taken per element kind (the median) from
    the copies measured; 1.0 where nothing was measured, and for a GPU whose lane curve
    measured beside busy copies carries its slowdown already. The elements that ran a copy take
    the median even below 1.0 (the copies ran faster than the profile read them alone: the
    profile was slow, as a 2-core VM's speed drifts, 7.5 ms a frame busy against 8.9 alone);
    the others, which the copies never ran (core groups), take it at 1.0 or more."""
    per_kind: dict[str, list[float]] = {}
    slowdowns = busy_slowdowns(profile, busy_fps, problem.lane_slowdown_busy)
    for el, slow in slowdowns.items():
        per_kind.setdefault(profile.elements.get(el, {}).get("kind", "cpu"), []).append(slow)
    median = {k: statistics.median(v) for k, v in per_kind.items()}

    def factor(e) -> float:
        if e.name in problem.lane_slowdown_busy or e.kind not in median:
            return 1.0
        return median[e.kind] if e.name in slowdowns else max(1.0, median[e.kind])
    return {e.name: factor(e) for e in problem.elements}


def contended(problem: Problem, factors: dict[str, float]) -> Problem:
    """`problem` with each element's times scaled by its slowdown under full load (shared
    caches, memory bandwidth, the GIL), as Kang et al. scale by DVFS ratios; `factors` replace
    any the problem had (the scaling starts from its times alone)."""
    base = problem.alone
    scale = np.array([factors.get(e.name, 1.0) for e in base.elements])
    return replace(base, layer_times=base.layer_times * scale, contention=dict(factors),
                   element_overhead={e: t * factors.get(e, 1.0)
                                     for e, t in base.element_overhead.items()})


def busy_lane_scales(problem: Problem, busy_fps: dict[str, float], lanes: dict[str, int],
                     batch: dict[str, int] | None = None) -> dict[str, float]:
    """Per GPU element with a busy lane curve that ran at k lanes and batch b (`batch`, default
    1) beside busy copies at `busy_fps` {element: frames/s}: its firing time there (k * b / its
    rate) over the model's (the lane curve at k times the batch table's factor at (b, k)). The
    lane table takes the better of two short passes beside the busy copies; a longer run of the
    same load read the GPU at 0.72-1.16x the curve, lowest where the copies fire often. A batch
    the problem has no factor for gives no scale: read against one frame's firing, a batched
    run looked like a GPU 3.5x faster than it is (alexnet at b16 beside 15 copies: x0.28)."""
    out = {}
    for el, fps in busy_fps.items():
        k, b = int(lanes.get(el, 1)), int((batch or {}).get(el, 1))
        if el not in problem.lane_slowdown_busy or fps <= 0:
            continue
        if b > 1 and (el not in problem.batch_slowdown or b not in problem.batch_sizes(el)):
            continue
        curve_s = (problem.actor_time(_whole(problem), el) * problem.slowdown(el, k, busy=True)
                   / problem.lane_busy_scale.get(el, 1.0)
                   * problem.batch_factor(el, b, k, busy=True))
        out[el] = (k * b / fps) / curve_s
    return out


def with_contention(problem: Problem, profile, busy_fps: dict[str, float],
                    busy_lanes: dict[str, int], busy_batch: dict[str, int] | None = None
                    ) -> tuple[Problem, dict]:
    """Step "contention": the elements' times, and the GPUs' busy lane curves, as measured with
    a whole-model copy on every element at once (`busy_fps`, the GPUs at `busy_lanes` and
    `busy_batch`). Returns the new problem and the step's summary (its factors)."""
    factors = contention_factors(profile, problem, busy_fps)
    out = contended(problem, factors)
    scales = busy_lane_scales(out, busy_fps, busy_lanes, busy_batch)
    out = replace(out, lane_busy_scale={**out.lane_busy_scale, **scales})
    return out, {"factors": {e: round(f, 4) for e, f in factors.items()},
                 "busy_lane_scale": {e: round(v, 4) for e, v in scales.items()}}


# ---- a GPU alone at several lanes, as a longer run measured it ----

def alone_lane_slowdown(problem: Problem, element: str, lanes: int, fps: float) -> float:
    """The lane curve's point at `lanes` that a run of the whole model alone on `element` at
    `fps` frames/s gives: its firing time there (lanes / fps) over the one-lane time. The lane
    table takes the better of two short passes; a longer run of the same design (the bench's
    peak-single baseline) read a GPU at many lanes well below the table (threads stalling on
    one driving core). Only that point is replaced: the stalls grow with the lanes, so scaling
    the whole curve by it under-predicts fewer lanes; the count measured stays a candidate
    (planner.measured_whole_models) where another now looks best."""
    return (lanes / fps) / problem.actor_time(_whole(problem), element)


def with_lanes_alone(problem: Problem, fps: dict[str, dict[int, float]]) -> tuple[Problem, dict]:
    """Step "lanes alone": each GPU's lane curve at the lane counts a run of the whole model
    alone measured (`fps` {element: {lanes: frames/s}}; one lane, elements without a lane
    curve and empty runs are left out)."""
    runs = {e: dict(c) for e, c in problem.lane_alone_runs.items()}
    said = {}
    for e, per in fps.items():
        for k, rate in per.items():
            k = int(k)
            if k <= 1 or e not in problem.lane_slowdown or rate <= 0:
                continue
            runs.setdefault(e, {})[k] = alone_lane_slowdown(problem, e, k, rate)
            said.setdefault(e, {})[k] = round(rate, 2)
    return replace(problem, lane_alone_runs=runs), {"frames_per_s": said}


# ---- GPU stages timed at their own lane counts ----

def with_stage_lanes(problem: Problem, tables: dict[str, dict[str, dict]]) -> tuple[Problem, dict]:
    """Step "stage lanes": each GPU stage's own lane curve and one-lane time from its lane
    table ({element: {subnet key: table}}, `profile.lanes.measure_stage_lanes`): a stage's lanes
    share the device by its work, not by its one-lane time."""

    curves, times = dict(problem.stage_slowdown), dict(problem.subnet_times)
    for e, per in tables.items():
        for key, table in per.items():
            curves[(e, key)] = {**curves.get((e, key), {}), **slowdown_curves(table)[0]}
            times[(e, key)] = float(table["1"]["alone"]["median"])
    return (replace(problem, stage_slowdown=curves, subnet_times=times),
            {"stages": sum(len(per) for per in tables.values())})


# ---- one plan's own stages, timed again (a plan's refined figure, not a search's) ----

def with_retimed_stages(problem: Problem, subnet_times: dict[tuple[str, str], float],
                        loaded_times: dict[tuple[str, str], float]) -> Problem:
    """One plan's stages as timed again as whole sub-networks (`subnet_times`, which win over
    the profile's) and with all the plan's elements busy at once (`loaded_times`, used only
    while that plan is evaluated)."""
    return replace(problem, subnet_times={**problem.subnet_times, **subnet_times},
                   loaded_times=dict(loaded_times))


# ---- the steps together ----

def profile_calibration(profile) -> Calibration:
    """The calibration a profile carries itself: its busy-copies run (`hetflow profile`
    measures one; a bench's profile leaves it to the bench's parallel baseline)."""
    busy = profile.calibration.get("busy_fps")
    if not busy:
        return {}
    return {"contention": {"busy_fps": dict(busy),
                           "busy_lanes": dict(profile.calibration.get("busy_lanes", {})),
                           "source": "the profile's busy-copies run"}}


def apply_step(problem: Problem, profile, name: str, data: dict) -> tuple[Problem, dict]:
    """One named step of a calibration on `problem`: (the new problem, the step's record)."""
    if name == "lanes_alone":
        out, summary = with_lanes_alone(problem, data)
    elif name == "contention":
        out, summary = with_contention(problem, profile, data.get("busy_fps", {}),
                                       data.get("busy_lanes", {}), data.get("busy_batch", {}))
        summary["source"] = data.get("source", "")
    elif name == "stage_lanes":
        out, summary = with_stage_lanes(problem, data)
    else:
        from hetflow.errors import InputError

        raise InputError(f"calibration step {name!r} is not one of: {', '.join(ORDER)}")
    return out, {"step": name, **summary}


def calibrate(problem: Problem, profile, calibration: Calibration) -> tuple[Problem, list[dict]]:
    """`problem` (as the profile gives it) with the calibration's steps applied in `ORDER`, and
    the record of the steps: "profile" first, then each step applied."""
    steps = [{"step": "profile", "source": str(getattr(profile, "source", "") or "")}]
    unknown = sorted(set(calibration) - set(ORDER))
    if unknown:
        apply_step(problem, profile, unknown[0], {})  # raises, naming the step
    for name in ORDER:
        if calibration.get(name):
            problem, record = apply_step(problem, profile, name, calibration[name])
            steps.append(record)
    return problem, steps


def load_calibration(path, model: str | None = None, platform: str | None = None
                     ) -> Calibration:
    """A calibration file (JSON, as `hetflow bench --report DIR` writes one per model); where
    it names its model and platform, they must be `model` and `platform` (if given)."""


    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"calibration {path}: cannot read it as JSON ({e})") from None
    if not isinstance(data, dict):
        raise InputError(f"calibration {path}: expected a JSON object of steps "
                         f"({', '.join(ORDER)})")
    unknown = sorted(set(data) - set(ORDER) - {"model", "platform"})
    if unknown:
        raise InputError(f"calibration {path}: unknown step {unknown[0]!r} (steps: "
                         f"{', '.join(ORDER)})")
    for what, want in (("model", model), ("platform", platform)):
        if want is not None and data.get(what, want) != want:
            raise InputError(f"calibration {path} was made for {what} {data[what]!r}, not "
                             f"{want!r}")
    return {k: v for k, v in data.items() if k in ORDER}
