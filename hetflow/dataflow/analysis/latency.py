"""Latency of one graph iteration, alone and in the self-timed periodic regime.

Definitions (times in seconds; an iteration is one firing of every actor's repetition count):
- `isolated`: one iteration run alone from the initial state (all firings as early as possible):
  from the start of its first firing to the end of its last firing; the longest path through the
  precedence graph of one iteration (the edges without tokens of hsdf.py).
- `steady`: the self-timed execution where every source actor may start its first firing of
  iteration k no earlier than k * period; in its periodic regime, the largest over iterations k of
  (end of the last firing of iteration k) - (start of the earliest first firing of iteration k
  of a source actor). Sources are the actors without input channels from other actors (all actors
  if there are none); actors that no source feeds are throttled like sources, so every actor runs
  at the same rate. `period` defaults to the graph's own period (1 / throughput); one less
  than 1e-9 (relative) below it counts as equal. For a shorter period: if the graph holds its
  sources back (each has a cycle of the critical ratio upstream, e.g. through a bounded FIFO)
  they cannot go faster anyway and the graph's own period is used; otherwise a backlog grows
  without bound and `steady` is math.inf.
  Note that `steady` may be below `isolated`: phases that need no input of iteration k can run
  before a source starts iteration k, which they cannot do in iteration 0.

Computed exactly by the max-plus recursion of the constraint graph in integer time units, until
the vector of start times repeats up to a shift of (iterations) * period.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction

import networkx as nx
import numpy as np

from hetflow.errors import InputError

from hetflow.dataflow.graphs import CsdfGraph
from hetflow.dataflow.analysis.hsdf import Hsdf, common_scale, expand, zero_token_order
from hetflow.dataflow.analysis.liveness import check_liveness
from hetflow.dataflow.analysis.mcr import max_cycle_ratio
from hetflow.dataflow.analysis.orders import FiringOrders
from hetflow.dataflow.analysis.simulation import StateSpaceLimitError
from hetflow.dataflow.analysis.throughput import critical_cycle

MAX_ITERATIONS = 10_000
RELATIVE_TOLERANCE = 1e-9


@dataclass
class LatencyResult:
    isolated: float  # s, one iteration alone
    steady: float  # s, worst iteration in the periodic regime (math.inf if unbounded)
    period: float  # s per iteration at which the sources were throttled
    sources: list[str]

    def to_dict(self) -> dict:
        return asdict(self)


def latency(g: CsdfGraph, period: float | None = None,
            max_iterations: int = MAX_ITERATIONS, orders: FiringOrders | None = None
            ) -> LatencyResult:
    """Isolated and steady-state latency of `g` (see the module docstring for definitions), with
    the processors' frame-interleaved firing `orders` (orders.py) if given. An iteration alone
    runs the same with or without them (a processor skips the firings of iterations that do not
    exist), so they change `steady` only."""
    if period is not None and not period > 0:
        raise InputError(f"latency of graph {g.name!r}: period must be positive, got {period}")
    check_liveness(g)
    h = expand(g, orders=orders)
    order = zero_token_order(h)
    own, _ = critical_cycle(h)
    sources = _sources(g)
    clocked, first_of_source = _clocked(g, h, sources)

    requested = own if period is None else Fraction(period)
    if abs(requested - own) <= own * RELATIVE_TOLERANCE:
        requested = own  # e.g. the float 1 / throughput, a hair off the exact period
    rate = max(requested, own)
    steady = None
    if requested < own and not _held_back(h, first_of_source, own):
        steady, rate = math.inf, requested
    scale = common_scale(h.time_values())
    scale *= (rate * scale).denominator
    run = _Recursion(h, order, clocked, first_of_source, scale, int(rate * scale))
    run.step()
    # with orders, the recursion's first step holds firings of earlier (retimed) iterations
    isolated = run.iteration_latency() / scale if not orders else isolated_latency(g)
    if steady is None:
        # slower than every cycle, the input alone sets the pace and the regime has a closed
        # form; at the graph's own pace the transient decides, so we run to periodicity
        steady = run.paced_by_input() if rate > own else run.steady(max_iterations, g.name)
    return LatencyResult(isolated, steady if math.isinf(steady) else steady / scale,
                         float(rate), sources)


def saturated_latency(g: CsdfGraph, max_iterations: int = MAX_ITERATIONS,
                      orders: FiringOrders | None = None) -> float:
    """Steady latency of `g` fed as fast as it takes frames: every actor fires as soon as its
    inputs and FIFO space allow (self-timed, nothing clocked), as a throughput run drives it.
    In its periodic regime, the largest over iterations of (end of the iteration's last firing)
    - (start of its first firing of a source). Where a stage after the first is the slowest,
    every frame waits in front of it as long as the FIFOs before it let the sources run ahead,
    which `latency` (sources clocked at the period) does not count; math.inf where nothing
    holds the sources back."""
    check_liveness(g)
    h = expand(g, orders=orders)
    own, _ = critical_cycle(h)
    clocked, first_of_source = _clocked(g, h, _sources(g))
    if not _held_back(h, first_of_source, own):
        return math.inf
    scale = common_scale(h.time_values())
    run = _Recursion(h, zero_token_order(h), clocked, first_of_source, scale, 0)
    run.step()
    return run.steady(max_iterations, g.name, free=True) / scale


def isolated_latency(g: CsdfGraph) -> float:
    """Seconds from the first firing's start to the last firing's end of one iteration of `g`
    run alone (`latency(g).isolated`, without the steady regime)."""
    check_liveness(g)
    h = expand(g)
    scale = common_scale(h.time_values())
    run = _Recursion(h, zero_token_order(h), *_clocked(g, h, _sources(g)), scale, 0)
    run.step()
    return run.iteration_latency() / scale


def _clocked(g: CsdfGraph, h: Hsdf, sources: list[str]) -> tuple[set[int], list[int]]:
    """The nodes clocked by the input (firing 0 of the sources and of the actors no source
    feeds), and the sources' firing 0, where an iteration's latency starts."""
    clocked = {h.actor.index(a) for a in sources + _unfed(g, sources)}
    return clocked, [h.actor.index(a) for a in sources]


def _sources(g: CsdfGraph) -> list[str]:
    fed = {c.dst for c in g.channels if c.src != c.dst}
    return [a.name for a in g.actors if a.name not in fed] or [a.name for a in g.actors]


def _unfed(g: CsdfGraph, sources: list[str]) -> list[str]:
    """Actors that no source reaches through channels."""
    flow = nx.DiGraph()
    flow.add_nodes_from(a.name for a in g.actors)
    flow.add_edges_from((c.src, c.dst) for c in g.channels)
    reached = set(sources)
    for s in sources:
        reached |= nx.descendants(flow, s)
    return [a.name for a in g.actors if a.name not in reached]


def _held_back(h: Hsdf, first_of_source: list[int], own: Fraction) -> bool:
    """Whether every source's first firing has a cycle of the critical ratio upstream."""
    # Howard on the reversed graph gives, per node, the largest ratio of a cycle upstream of it.
    upstream = max_cycle_ratio(h.n, h.dst, h.src, h.weight, h.tokens).eta
    return bool(np.all(upstream[first_of_source] >= float(own) * (1 - 1e-9)))


class _Recursion:
    """x_k(v) = max(0, [(k + shift(v)) * rate if v is clocked], max over edges u->v of
    x_{k-d}(u) + w). Step k computes node v's firing of the graph's iteration k + shift(v)
    (shift <= 0, see hsdf.Hsdf), so an iteration's latency is read `lag` steps later."""

    def __init__(self, h: Hsdf, order: list[int], clocked: set[int], first_of_source: list[int],
                 scale: int, rate: int):
        self.order, self.clocked, self.first_of_source = order, clocked, first_of_source
        self.rate = rate
        self.time = [int(Fraction(t) * scale) for t in h.time]
        self.shift = [0] * h.n if h.shift is None else [int(s) for s in h.shift]
        self.lag = -min(self.shift, default=0)
        self.inputs: list[list[tuple[int, int, int]]] = [[] for _ in range(h.n)]
        for u, v, w, d in zip(h.src.tolist(), h.dst.tolist(), h.exact_weights(scale),
                              h.tokens.tolist()):
            self.inputs[v].append((u, w, d))
        self.depth = max(1, int(h.tokens.max()) if len(h.tokens) else 1, self.lag + 1)
        self.history: list[list[int]] = []  # the last `depth` iterations' start times
        self.k = 0

    def step(self) -> list[int]:
        k, hist = self.k, self.history
        x = [0] * len(self.time)
        for v in self.order:
            best = (k + self.shift[v]) * self.rate if v in self.clocked else 0
            for u, w, d in self.inputs[v]:
                if d <= k:
                    start = (x if d == 0 else hist[-d])[u]
                    if start + w > best:
                        best = start + w
            x[v] = best
        hist.append(x)
        if len(hist) > self.depth:
            del hist[0]
        self.k += 1
        return x

    def iteration_latency(self) -> int | None:
        """Latency of the graph's iteration `lag` steps before the last one computed (None while
        it is not complete)."""
        if self.k <= self.lag:
            return None
        # node v ran that iteration at step (k - 1 - lag) - shift(v) = k - 1 - lag + lag(v)
        x = [self.history[-1 - self.lag - s][v] for v, s in enumerate(self.shift)]
        end = max(s + t for s, t in zip(x, self.time))
        return end - min(x[v] for v in self.first_of_source)

    def paced_by_input(self) -> int:
        """Steady latency when `rate` exceeds every cycle ratio: then, after a transient,
        x_k(v) = k * rate + y(v) where y(v) is the longest path from the clocked nodes under
        weights w - rate * d (every cycle is negative under them, so it exists); the graph's
        iteration K runs at node v at K * rate + y(v) - shift(v) * rate."""
        y: list[int | None] = [None] * len(self.time)
        for v in self.clocked:
            y[v] = self.shift[v] * self.rate
        changed = True
        while changed:  # Bellman-Ford, sweeping in the order of one iteration
            changed = False
            for v in self.order:
                best = y[v]
                for u, w, d in self.inputs[v]:
                    if y[u] is not None and (best is None or y[u] + w - self.rate * d > best):
                        best = y[u] + w - self.rate * d
                if best != y[v]:
                    y[v], changed = best, True
        z = [b - s * self.rate for b, s in zip(y, self.shift)]
        end = max(s + t for s, t in zip(z, self.time))
        return end - min(z[v] for v in self.first_of_source)

    def steady(self, max_iterations: int, name: str, free: bool = False) -> int:
        """The largest iteration latency of the periodic regime: the recursion runs until its
        state repeats up to a shift (`free`: any shift, the sources not clocked; else the
        clock's (iterations) * rate)."""
        seen: dict[tuple, int] = {}
        latencies = [self.iteration_latency()]
        while self.k < max_iterations:
            self.step()
            latencies.append(self.iteration_latency())
            if self.k < self.depth:
                continue
            k = self.k - 1
            if free:
                base = min(s for x in self.history for s in x)
                key = tuple(s - base for x in self.history for s in x)
            else:
                key = tuple(s - (k - j) * self.rate
                            for j, x in enumerate(reversed(self.history)) for s in x)
            if key in seen:
                return max(x for x in latencies[seen[key]:k] if x is not None)
            seen[key] = k
        raise StateSpaceLimitError(f"latency of graph {name!r}: no periodic regime within "
                                   f"{max_iterations} iterations")
