"""`run_plan`: load the plan's model, build the sessions, stream frames, check, report."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np

from hetflow import interrupt
from hetflow.errors import InputError
from hetflow.plan.plan import Plan
from hetflow.model.graph import CnnGraph

from hetflow.runtime.report import RunReport
from hetflow.model import is_zoo_model, resolve_model
from hetflow.model.accuracy import Tolerance
from hetflow.runtime.check import check_precision_run
from hetflow.runtime.inputs import image_dir_source, npz_source, random_source
from hetflow.runtime.trace import write_trace


def load_plan_model(plan: Plan, model: str | None = None) -> CnnGraph:
    """The plan's model (or `model`, a path or zoo name), refusing one with another hash."""

    arg = model or plan.model_source or plan.model_name
    if model is None and plan.model_source and not Path(plan.model_source).exists() \
            and is_zoo_model(plan.model_name):
        arg = plan.model_name  # a zoo model's file on the machine that planned: built here
    shapes = {k: tuple(v) for k, v in plan.input_shapes.items()} or None
    graph = resolve_model(arg, shapes, plan.fuse)
    if plan.model_hash and graph.model_hash != plan.model_hash:
        raise InputError(f"the plan was made for model {plan.model_name} (hash "
                         f"{plan.model_hash[:12]}), but {arg} has hash {graph.model_hash[:12]}")
    if plan.splits:
        from hetflow.model.split import apply_splits

        graph = apply_splits(graph, plan.splits, plan.fuse)
    plan.check_covers([l.name for l in graph.layers], f"plan for {plan.model_name}")
    return graph


def make_source(graph: CnnGraph, spec: str, seed: int = 0) -> tuple[Callable[[int], dict], int | None]:


    if spec == "random":
        return random_source(graph, seed), None
    if spec.endswith(".npz"):
        return npz_source(graph, spec)
    if Path(spec).is_dir():
        return image_dir_source(graph, spec)
    raise InputError(f"--input {spec!r}: use 'random', an .npz file with one array per model "
                     "input, or a folder of images")


def plan_tolerance(plan: Plan) -> Tolerance | None:
    """The tolerance the plan's precisions were chosen within (`hetflow map --tolerance`)."""
    given = plan.search.get("tolerance")
    return Tolerance(**given) if given else None


def checked_accuracy(plan: Plan, graph: CnnGraph, kept: dict, source: Callable[[int], dict],
                     input_spec: str, tolerance: Tolerance | None) -> tuple[float, dict]:
    """The reference check of the kept frames (`check.check_precision_run`): the largest
    absolute error, and the report of the run's deviation, saying the precisions and inputs."""
    precisions = sorted({e.precision for e in plan.elements.values()})
    worst, accuracy = check_precision_run(
        graph, plan.app, precisions, kept, source, tolerance or plan_tolerance(plan),
        label=f"{plan.model_name} at {', '.join(precisions)}")
    inputs = "random frames" if input_spec == "random" else input_spec
    return worst, {**accuracy.to_dict(), "precisions": precisions, "inputs": inputs}


def run_plan(plan: Plan, graph: CnnGraph | None = None, frames: int = 500, warmup: int = 50,
             input_spec: str = "random", check: str = "first", check_frames: int = 8,
             trace_path: str | Path | None = None, stall_timeout: float = 30.0,
             progress: Callable[[str], None] | None = None,
             on_frame: Callable[[int], None] | None = None, engine: str = "local",
             address: str | None = None, runtime_env: dict | None = None,
             max_inflight: int | None = None, rate: float | None = None,
             tolerance: Tolerance | None = None) -> RunReport:
    """Stream `frames` frames through the plan and report the steady rate after `warmup`,
    latencies, utilisation and the reference check of the kept outputs (`check`: first
    `check_frames`, all or none). `engine`: local (threads of this process) or ray (one Ray
    actor per element, on its node: `address` of the cluster, `runtime_env` of the workers,
    at most `max_inflight` frames submitted, default `schedule.frames_in_flight`). `rate`:
    frames arrive at this many a second, as from a camera, and each frame's latency counts
    from its arrival; default: fed as fast as the plan takes them. `tolerance`: how far the
    outputs of a plan with elements of another precision than fp32 may be from the fp32
    reference (default: the plan's, else `Tolerance()`); fp32 plans are checked to a few ulps."""
    from hetflow.runtime.energy import start_energy

    if check not in ("first", "all", "none"):
        raise InputError(f"--check {check!r}: use first, all or none")
    if frames < 2:
        raise InputError("--frames must be at least 2")
    if engine not in ("local", "ray"):
        raise InputError(f"--engine {engine!r}: use local or ray")
    if rate is not None and not (0 < rate < math.inf):
        raise InputError(f"--rate {rate}: frames per second must be a positive number")
    interrupt.check()  # a signal that an earlier run swallowed: no new run starts
    if engine == "ray":
        from hetflow.runtime.ray_engine import import_ray

        import_ray()  # say how to get Ray before loading anything
    else:
        from hetflow.plan.plan import check_plan_lanes
        from hetflow.platform.detect import check_cores_present

        check_cores_present(plan.elements.values(),
                            f"plan for {plan.model_name} on {plan.platform_name}")
        check_plan_lanes(plan.mapping, plan.elements)
    graph = graph or load_plan_model(plan)
    source, _ = make_source(graph, input_spec)
    keep = {"first": lambda f: f < check_frames, "all": lambda f: True,
            "none": lambda f: False}[check]
    warmup = min(warmup, frames // 4)
    trace = trace_path is not None
    arrivals = None if rate is None else np.arange(frames) / rate
    energy = start_energy(plan.elements, local=engine == "local")
    if engine == "ray":
        from hetflow.runtime.ray_engine import run_on_ray

        report, kept, events = run_on_ray(plan, graph, source, frames, warmup, keep,
                                          stall_timeout, progress, on_frame, trace, address,
                                          runtime_env, max_inflight, arrivals)
    else:
        from hetflow.backends.reuse import reusing_runners

        from hetflow.runtime.engine import prepare, run_prepared

        # inside a scope (a bench's, else this run's own) the members of a replica group on
        # single cores share one session of their layers
        with reusing_runners(), energy:
            pp = prepare(plan, graph, progress)
            try:
                report, kept, state = run_prepared(pp, source, frames, warmup, keep,
                                                   stall_timeout, trace, on_frame, arrivals)
            finally:
                pp.close()
        events = state.events
    report.energy = energy.finish(report)
    if rate is not None:
        report.notes["arrival_rate"] = rate
    if kept:
        report.max_abs_error, report.accuracy = checked_accuracy(plan, graph, kept, source,
                                                                 input_spec, tolerance)
        report.checked_frames = len(kept)
    if trace and events:
        write_trace(trace_path, events, min(e[4] for e in events))
    return report
