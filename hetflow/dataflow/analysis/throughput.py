"""Throughput of the self-timed execution by maximum cycle ratio of the HSDF expansion."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from fractions import Fraction

from hetflow.dataflow.graphs import CsdfGraph
from hetflow.dataflow.analysis.hsdf import Hsdf, expand, zero_token_order
from hetflow.dataflow.analysis.liveness import check_liveness
from hetflow.dataflow.analysis.mcr import max_cycle_ratio
from hetflow.dataflow.analysis.orders import FiringOrders


@dataclass
class ThroughputResult:
    throughput: float  # graph iterations per second (math.inf if nothing limits it)
    period: float  # seconds per iteration, 1 / throughput
    critical: list[str] = field(default_factory=list)  # actors on a critical cycle, if known
    method: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def throughput_mcr(g: CsdfGraph, orders: FiringOrders | None = None) -> ThroughputResult:
    """Self-timed throughput as 1 / maximum cycle ratio of the constraint graph (hsdf.py), with
    the processors' frame-interleaved firing `orders` (orders.py) if given.

    Raises DeadlockError (naming blocked actors and channels) if the graph cannot run, or if the
    orders make a firing wait for itself, InputError on an inconsistent or malformed graph.
    """
    check_liveness(g, orders or ())
    h = expand(g, orders=orders)
    period, cycle = critical_cycle(h)
    if period <= 0:
        return ThroughputResult(math.inf, 0.0, [], "mcr")
    return ThroughputResult(1.0 / float(period), float(period), _actors_on(h, cycle), "mcr")


def critical_cycle(h: Hsdf) -> tuple[Fraction, list[int]]:
    """(maximum cycle ratio in seconds per iteration, exact; nodes of a critical cycle).

    Howard's iteration runs on floats; the ratio of the cycle it finds is then summed exactly,
    so that equal graphs give bit-equal periods whatever the order of the float sums.
    """
    zero_token_order(h)  # a cycle without tokens would make the ratio infinite
    result = max_cycle_ratio(h.n, h.src, h.dst, h.weight, h.tokens)
    weight = Fraction(0)
    tokens = 0
    for e in result.cycle_edges:
        weight += (Fraction(h.time[int(h.src[e])]) if h.with_time[e] else 0) \
            + Fraction(float(h.delay[e]))
        tokens += int(h.tokens[e])
    return weight / tokens, result.cycle


def _actors_on(h: Hsdf, cycle: list[int]) -> list[str]:
    seen: dict[str, None] = {}
    for v in cycle:
        seen.setdefault(h.actor[v], None)
    return list(seen)
