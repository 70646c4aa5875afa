"""Smallest channel capacities that keep a target throughput.

Throughput never decreases when a capacity grows (a capacity only adds tokens to a reverse
channel), so per channel the smallest capacity that keeps the target is found by bisection.
We first grow all capacities together until the target is met, then shrink the channels one at
a time, in graph order, each to its smallest value given the others. The result is *minimal*:
no single channel can be made smaller (shrinking the others later only lowers throughput, so a
channel that could not shrink before still cannot). It need not be the distribution of minimum
total size, which is a harder (NP-hard in general) search.
"""
from __future__ import annotations

import copy
from fractions import Fraction

from hetflow.errors import DeadlockError, InfeasibleError, InputError

from hetflow.dataflow.graphs import Channel, CsdfGraph
from hetflow.dataflow.analysis.hsdf import Expander
from hetflow.dataflow.analysis.liveness import check_liveness
from hetflow.dataflow.analysis.throughput import critical_cycle

RELATIVE_TOLERANCE = 1e-9
MAX_DOUBLINGS = 40


def min_buffer_capacities(g: CsdfGraph, target_throughput: float | None = None
                          ) -> dict[str, int]:
    """Capacity (tokens, initial tokens included) of every channel, minimal per channel, such
    that the self-timed throughput stays at least `target_throughput` (relative tolerance 1e-9).

    Existing capacities of `g` are ignored. The default target is the throughput of `g` with
    every channel unbounded. Raises DeadlockError if `g` deadlocks even unbounded, and
    InfeasibleError if no finite capacities reach the target (e.g. a target above the unbounded
    throughput, or an unbounded throughput that is infinite).
    """
    unbounded = copy.deepcopy(g)
    for c in unbounded.channels:
        c.capacity = None
    check_liveness(unbounded)
    sizing = _Sizing(unbounded)
    best_period = sizing.period({})
    if target_throughput is None:
        if best_period == 0:
            raise InfeasibleError(f"graph {g.name!r} has infinite throughput with unbounded "
                                  f"channels; no finite capacities reach it")
        target = best_period
    else:
        if not target_throughput > 0:
            raise InputError(f"target throughput must be positive, got {target_throughput}")
        target = Fraction(1 / target_throughput)
        if best_period > target * (1 + RELATIVE_TOLERANCE):
            raise InfeasibleError(f"graph {g.name!r} reaches only {1 / float(best_period):.6g} "
                                  f"iterations/s even with unbounded channels, below the target "
                                  f"{target_throughput:.6g}")
    limit = target * (1 + RELATIVE_TOLERANCE)

    def enough(caps: dict[str, int]) -> bool:
        period = sizing.period(caps)
        return period is not None and period <= limit

    caps = {c.name: _generous(c, sizing.expander) for c in unbounded.channels}
    for _ in range(MAX_DOUBLINGS):
        if enough(caps):
            break
        caps = {c.name: c.initial_tokens + 2 * (caps[c.name] - c.initial_tokens)
                for c in unbounded.channels}
    else:
        raise InfeasibleError(f"graph {g.name!r}: no capacities found that reach the target "
                              f"throughput")
    for c in unbounded.channels:
        lo = c.initial_tokens if c.src == c.dst else max(c.initial_tokens, max(c.production))
        hi = caps[c.name]
        while lo < hi:
            mid = (lo + hi) // 2
            if enough({**caps, c.name: mid}):
                hi = mid
            else:
                lo = mid + 1
        caps[c.name] = hi
    return caps


def _generous(c: Channel, ex: Expander) -> int:
    """A first guess: the initial tokens plus what one iteration moves plus the largest burst."""
    per_iteration = ex.per_iteration(c, True)[-1]
    return c.initial_tokens + per_iteration + max(c.production)


class _Sizing:
    """Maximum cycle ratio of `g` under changing capacities, rebuilding only what changed."""

    def __init__(self, g: CsdfGraph):
        self.expander = Expander(g)
        self.base = self.expander.base_edges()
        self.channels = g.channels
        self.cache: dict[tuple[str, int], object] = {}

    def period(self, caps: dict[str, int]) -> Fraction | None:
        """Period (s per iteration) with these capacities (others unbounded); None: deadlock."""
        parts = [self.base]
        for c in self.channels:
            if c.name in caps:
                key = (c.name, caps[c.name])
                if key not in self.cache:
                    self.cache[key] = self.expander.capacity_edges(c, caps[c.name])
                parts.append(self.cache[key])
        h = self.expander.assemble(parts)
        try:
            period, _ = critical_cycle(h)
        except DeadlockError:
            return None
        return period
