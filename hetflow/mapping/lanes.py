"""Lane counts and batches of elements in a mapping (see mapping.py): strategies search mappings
with every GPU at its best measured lane count and batch 1; a plan then takes the fewest frames
in flight (lanes x batch) that keep its predicted throughput (more add latency: frames in
flight, a batch's fill, and device memory)."""
from __future__ import annotations

from dataclasses import replace

from hetflow.errors import DeadlockError, InputError

from hetflow.plan.mapping import Mapping, group_members
from hetflow.mapping.problem import Metrics, Problem, evaluate
from hetflow.plan.plan import check_plan_batch, check_plan_lanes


def check_lanes(problem: Problem, mapping: Mapping) -> None:
    """`check_plan_lanes` and `check_plan_batch`, no batch the profile did not measure, and no
    more lanes than the GPU's memory holds (as profiled)."""
    check_plan_lanes(mapping, {e: problem.element(e) for e in mapping.elements})
    check_plan_batch(mapping)
    for e, b in mapping.batch.items():
        problem.check_batch(e, b)
    for e, k in mapping.lanes.items():
        limit = problem.lane_limit.get(e)
        if limit is not None and k > limit:
            raise InputError(f"element {e!r}: {k} lanes do not fit its device memory (at most "
                             f"{limit}, measured by the profile)")


def batchable(problem: Problem, mapping: Mapping, element: str) -> bool:
    """Whether `fit_lanes` may give `element` a batch: its profile measured batches and its
    actor fires frame by frame (an interleaved actor runs one frame's phases at a time). A
    member of a group with CPU copies may be batched: its lanes take blocks of consecutive
    frames from the group's dispatch (`plan.schedule.Dispatch`), and the group's rate counts
    it at k * b / t(b, k) frames/s (`problem.timed_graph`)."""
    return (element in problem.batch_slowdown and mapping.round_frames <= 1
            and not any(element in group_members(a) for a in mapping.interleave))


def fit_lanes(problem: Problem, mapping: Mapping, latency_cap: float | None = None,
              tolerance: float = 0.01, rate_floor: float | None = None
              ) -> tuple[Mapping, Metrics | None]:
    """`mapping` with lanes and a batch for each element that has a measured lane curve or
    batch table and none set: the fewest frames in flight (lanes x batch, then the smaller
    batch) predicted within `tolerance` of the best throughput (with a `latency_cap`, the
    highest throughput among the choices predicted within the cap, their latency paying for
    the batch fill). With a `rate_floor`, the fewest frames in flight predicted at least that
    many frames/s (within the cap) where some choice is: every frame past those adds latency
    for a rate the plan does not need. Returns the mapping and its metrics (None when nothing
    was chosen)."""
    free = [e for e in dict.fromkeys(mapping.elements)
            if (e in problem.lane_slowdown and e not in mapping.lanes)
            or (batchable(problem, mapping, e) and e not in mapping.batch)]
    if not free:
        return mapping, None
    lanes, batch = dict(mapping.lanes), dict(mapping.batch)
    metrics = None
    for e in free:  # one element at a time, the others at their best count and batch 1
        # rounds of several frames are analysed on the graph unfolded, which takes actors of
        # one frame at a time: such a mapping keeps its GPUs at one lane
        if e in mapping.lanes or e not in problem.lane_slowdown:
            ks = [mapping.lanes.get(e)]  # None: no lanes entry (not a laned element)
        else:
            ks = [k for k in (problem.lane_counts(e) if mapping.round_frames <= 1 else [1])
                  if k <= problem.lane_limit.get(e, 1 << 30)]
        bs = ([mapping.batch[e]] if e in mapping.batch
              else problem.batch_sizes(e) if batchable(problem, mapping, e) else [1])
        scored = []
        for k in ks:
            for b in bs:
                m = replace(mapping, lanes={**lanes, **({e: k} if k is not None else {})},
                            batch={**batch, e: b} if b > 1 else batch)
                try:
                    scored.append(((k or 1) * b, b, k, evaluate(problem, m)))
                except DeadlockError:
                    # a batch in a round trip through an actor that takes each frame's
                    # phases in turn waits for b frames that actor cannot send first
                    if b == 1 or e in mapping.batch:
                        raise
        top = max(x[3].throughput for x in scored)
        fits = [x for x in scored if latency_cap is None or x[3].latency <= latency_cap]
        enough = [x for x in fits if rate_floor is not None and x[3].throughput >= rate_floor]
        if enough:
            pick = min(enough, key=lambda x: x[:2])
        elif latency_cap is not None and fits:
            best = max(x[3].throughput for x in fits)
            pick = min((x for x in fits if x[3].throughput >= (1 - tolerance) * best),
                       key=lambda x: x[:2])
        else:
            pick = min((x for x in scored if x[3].throughput >= (1 - tolerance) * top),
                       key=lambda x: x[:2])
        _, b, k, metrics = pick
        if k is not None:
            lanes[e] = k
        if b > 1:
            batch[e] = b
    return replace(mapping, lanes=lanes, batch=batch), metrics
