"""The one search `hetflow map` and `hetflow bench` plan with: a calibrated cost model in, the
candidate plans of one plan kind out, best prediction first (the pilots, if any, choose among
them: `mapping.pilot.choose_plan`)."""
from __future__ import annotations

import math
from typing import Callable

from hetflow.errors import InfeasibleError
from hetflow.model.accuracy import Tolerance
from hetflow.platform.precision import DEFAULT_PRECISION

from hetflow.mapping import planner
from hetflow.plan.plan import Plan
from hetflow.mapping.problem import Problem, latency_at_rate
from hetflow.mapping.strategies.base import SearchResult


def search_kind(problem: Problem, strategies: list[str], platform_name: str, count: int = 1,
                seed: int = 0, fuse: bool = False, options: dict | None = None,
                log: Callable[[str], None] = lambda msg: None, *,
                interleave: bool = True, rate_floor: float | None = None, tail: float = 1.0,
                skip_unfit: bool | None = None, calibration: list[dict] | None = None
                ) -> list[tuple[Plan, SearchResult]]:
    """The best `count` candidate plans over `strategies` (`planner.search_candidates`), each
    recording the `calibration` steps its cost model was made with (`plan.search`).

    With a `latency_cap` option and `tail` above 1, designs whose predicted latency (a median)
    times `tail` keeps the cap (a p99) first; where none does, designs within the cap itself
    (the pilots then measure each design's p99 against the cap). Raises InfeasibleError where
    no strategy finds a design."""
    options = dict(options or {})

    def search(opts: dict) -> list:
        return planner.search_candidates(problem, strategies, platform_name, count, seed, fuse,
                                         opts, log, skip_unfit=skip_unfit,
                                         interleave=interleave, rate_floor=rate_floor)

    cap = options.get("latency_cap")
    found = []
    if cap is not None and tail > 1.0:
        try:
            found = search({**options, "latency_cap": cap / tail})
        except InfeasibleError:
            found = []
        if not found:
            log(f"no design predicted {tail:.2f}x within the latency cap of "
                f"{cap * 1e3:.2f} ms; searching within the cap itself")
    if not found:
        found = search(options)
    for plan, _ in found:
        plan.search = {**plan.search, "calibration": list(calibration or [])}
    return found


def record_precision(plan, precision: str | None, tolerance: Tolerance | None) -> None:
    """Say in the plan the precisions it was searched among and the tolerance they met, which
    `hetflow run` checks its outputs against (nothing for fp32 plans, checked as before)."""
    if precision not in (None, DEFAULT_PRECISION) or tolerance is not None:
        plan.search["precision"] = precision or DEFAULT_PRECISION
        plan.search["tolerance"] = (tolerance or Tolerance()).to_dict()


def record_arrivals(plan, problem: Problem, rate: float | None,
                    batch_wait: float | None) -> None:
    """Give the plan's batched elements `batch_wait` seconds to wait for a partial batch to
    fill (Triton's queue delay: a batch fires when full or when its first frame has waited
    that long, padded), and with `rate` predict each frame's latency with frames arriving on
    a clock at `rate` frames/s (`latency_at_rate`): the median frame's, which `hetflow run
    --rate` measures as its p50, and a batch's first frame's, which waits the longest. None
    where `rate` is above what the plan takes with partial batches (batches then fill: the
    plan's own latency holds)."""
    if batch_wait is not None:
        plan.mapping.batch_wait = {e: batch_wait for e, b in plan.mapping.batch.items() if b > 1}
    if rate is None:
        return

    def finite(x: float) -> float | None:
        return x if math.isfinite(x) else None

    plan.predicted["at_rate"] = {
        "rate": rate, "batch_wait": dict(plan.mapping.batch_wait),
        "latency_p50": finite(latency_at_rate(problem, plan.mapping, rate, median=True)),
        "latency_first": finite(latency_at_rate(problem, plan.mapping, rate))}
