"""The one search `hetflow map` and `hetflow bench` plan with: a calibrated cost model in, the
candidate plans of one plan kind out, best prediction first (the pilots, if any, choose among
them: `mapping.pilot.choose_plan`)."""
from __future__ import annotations

from typing import Callable

from hetflow.errors import InfeasibleError
from hetflow.model.accuracy import Tolerance
from hetflow.platform.precision import DEFAULT_PRECISION

from hetflow.mapping import planner
from hetflow.plan.plan import Plan
from hetflow.mapping.problem import Problem
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
