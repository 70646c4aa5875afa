"""`run_plan`: load the plan's model, build the sessions, stream frames, check, report."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from hetflow.errors import InputError
from hetflow.mapping.plan import Plan
from hetflow.model.graph import CnnGraph

from .report import RunReport


def load_plan_model(plan: Plan, model: str | None = None) -> CnnGraph:
    """The plan's model (or `model`, a path or zoo name), refusing one with another hash."""
    from hetflow.model import resolve_model

    arg = model or plan.model_source or plan.model_name
    shapes = {k: tuple(v) for k, v in plan.input_shapes.items()} or None
    graph = resolve_model(arg, shapes, plan.fuse)
    if plan.model_hash and graph.model_hash != plan.model_hash:
        raise InputError(f"the plan was made for model {plan.model_name} (hash "
                         f"{plan.model_hash[:12]}), but {arg} has hash {graph.model_hash[:12]}")
    if plan.splits:
        from hetflow.model.split import apply_splits

        graph = apply_splits(graph, plan.splits, plan.fuse)
    return graph


def make_source(graph: CnnGraph, spec: str, seed: int = 0) -> tuple[Callable[[int], dict], int | None]:
    from pathlib import Path

    from .inputs import image_dir_source, npz_source, random_source

    if spec == "random":
        return random_source(graph, seed), None
    if spec.endswith(".npz"):
        return npz_source(graph, spec)
    if Path(spec).is_dir():
        return image_dir_source(graph, spec)
    raise InputError(f"--input {spec!r}: use 'random', an .npz file with one array per model "
                     "input, or a folder of images")


def run_plan(plan: Plan, graph: CnnGraph | None = None, frames: int = 500, warmup: int = 50,
             input_spec: str = "random", check: str = "first", check_frames: int = 8,
             trace_path: str | Path | None = None, stall_timeout: float = 30.0,
             progress: Callable[[str], None] | None = None,
             on_frame: Callable[[int], None] | None = None) -> RunReport:
    from .check import check_outputs
    from .engine import prepare, run_prepared
    from .trace import write_trace

    if check not in ("first", "all", "none"):
        raise InputError(f"--check {check!r}: use first, all or none")
    if frames < 2:
        raise InputError("--frames must be at least 2")
    from hetflow.platform.detect import check_cores_present

    from hetflow.mapping.lanes import check_plan_lanes

    check_cores_present(plan.elements.values(), f"plan for {plan.model_name} on {plan.platform_name}")
    check_plan_lanes(plan.mapping, plan.elements)
    graph = graph or load_plan_model(plan)
    source, _ = make_source(graph, input_spec)
    keep = {"first": lambda f: f < check_frames, "all": lambda f: True,
            "none": lambda f: False}[check]
    pp = prepare(plan, graph, progress)
    try:
        report, kept, state = run_prepared(pp, source, frames, min(warmup, frames // 4), keep,
                                           stall_timeout, trace_path is not None, on_frame)
    finally:
        pp.close()
    if kept:
        report.max_abs_error = check_outputs(graph, plan.app, kept, source)
        report.checked_frames = len(kept)
    if trace_path is not None and state.events:
        t0 = min(e[4] for e in state.events)
        write_trace(trace_path, state.events, t0)
    return report
