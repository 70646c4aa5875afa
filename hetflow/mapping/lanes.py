"""Lane counts of GPU elements in a mapping (see mapping.py): strategies search mappings with
every GPU at its best measured lane count; a plan then takes the fewest lanes that keep its
predicted throughput (more lanes add frames in flight, hence latency, and device memory)."""
from __future__ import annotations

from dataclasses import replace

from hetflow.errors import InputError

from hetflow.plan.mapping import Mapping
from hetflow.mapping.problem import Metrics, Problem, evaluate
from hetflow.plan.plan import check_plan_lanes


def check_lanes(problem: Problem, mapping: Mapping) -> None:
    """`check_plan_lanes`, and no more lanes than the GPU's memory holds (as profiled)."""
    check_plan_lanes(mapping, {e: problem.element(e) for e in mapping.elements})
    for e, k in mapping.lanes.items():
        limit = problem.lane_limit.get(e)
        if limit is not None and k > limit:
            raise InputError(f"element {e!r}: {k} lanes do not fit its device memory (at most "
                             f"{limit}, measured by the profile)")


def fit_lanes(problem: Problem, mapping: Mapping, latency_cap: float | None = None,
              tolerance: float = 0.01, rate_floor: float | None = None
              ) -> tuple[Mapping, Metrics | None]:
    """`mapping` with a lane count for each GPU element that has a measured lane curve and none
    set: the fewest lanes predicted within `tolerance` of the best throughput (with a
    `latency_cap`, the highest throughput among the counts predicted within the cap). With a
    `rate_floor`, the fewest lanes predicted at least that many frames/s (within the cap) where
    some count is: every lane past those adds a frame in flight, hence latency, for a rate the
    plan does not need. Returns the mapping and its metrics (None when nothing was chosen)."""
    free = [e for e in dict.fromkeys(mapping.elements)
            if e in problem.lane_slowdown and e not in mapping.lanes]
    if not free:
        return mapping, None
    chosen = dict(mapping.lanes)
    metrics = None
    for e in free:  # one GPU at a time, the others at their best count
        scored = []
        # rounds of several frames are analysed on the graph unfolded, which takes actors of
        # one frame at a time: such a mapping keeps its GPUs at one lane
        for k in problem.lane_counts(e) if mapping.round_frames <= 1 else [1]:
            if k > problem.lane_limit.get(e, 1 << 30):
                continue
            m = replace(mapping, lanes={**chosen, e: k})
            scored.append((k, evaluate(problem, m)))
        top = max(r.throughput for _, r in scored)
        fits = [(k, r) for k, r in scored if latency_cap is None or r.latency <= latency_cap]
        enough = [(k, r) for k, r in fits if rate_floor is not None and r.throughput >= rate_floor]
        if enough:
            k, metrics = min(enough, key=lambda x: x[0])
        elif latency_cap is not None and fits:
            best = max(r.throughput for _, r in fits)
            k, metrics = min(((k, r) for k, r in fits if r.throughput >= (1 - tolerance) * best),
                             key=lambda x: x[0])
        else:
            k, metrics = min(((k, r) for k, r in scored if r.throughput >= (1 - tolerance) * top),
                             key=lambda x: x[0])
        chosen[e] = k
    return replace(mapping, lanes=chosen), metrics
