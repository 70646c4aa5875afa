"""Choosing frame-interleaved firing orders (orders.Firing) that minimise the analysed period.

An actor alone on its processor with concurrency 1 runs its firings of one iteration (a CNN
stage's phases, one frame) in index order. When a frame leaves the processor between two phases
(GPU -> CPU -> GPU), that order makes the processor wait for the round trip. Offsets that step
down at the phases fed by other actors let the processor run the early phases of later frames
meanwhile: firing i gets offset o_i = the number of chosen cuts after i, so offsets never increase
along the firing order (a frame's phases still run in order on its processor, which keeps the
tensors they share locally in order) and the last firing has offset 0.

The search starts from the best of no interleaving and a few software-pipelined orders of the
whole graph (`level_offsets`), then runs a coordinate descent: per actor, every set of at most `max_offset` cuts (with
repetition) among its fed phases, the other actors' orders fixed, keeping the best live one;
passes repeat while the period improves. Every candidate is analysed exactly (throughput_mcr);
orders that deadlock are skipped.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations_with_replacement

from hetflow.errors import DeadlockError

from hetflow.dataflow.graphs import CsdfGraph
from hetflow.dataflow.analysis.orders import Firing, FiringOrders
from hetflow.dataflow.analysis.repetition import repetition_vector
from hetflow.dataflow.analysis.throughput import ThroughputResult, throughput_mcr
import networkx as nx
import time


@dataclass(frozen=True)
class InterleavedOrders:
    orders: FiringOrders  # processor -> its cyclic order (only processors where it interleaves)
    offsets: dict[str, list[int]]  # the same as each actor's frame offset per firing
    result: ThroughputResult  # the analysis with these orders
    plain: ThroughputResult  # the analysis without (each actor's firings in index order)


def offsets_order(actor: str, offsets: list[int]) -> tuple[Firing, ...]:
    return tuple(Firing(actor, i, o) for i, o in enumerate(offsets))


def fed_firings(g: CsdfGraph, actor: str, q: int) -> list[int]:
    """Firings after the first that consume from another actor: where a frame comes back."""
    return sorted({j for c in g.channels if c.dst == actor and c.src != actor
                   for j in range(1, q) if c.consumption[j % len(c.consumption)] > 0})


def candidate_offsets(g: CsdfGraph, actor: str, q: int, max_offset: int) -> list[list[int]]:
    """Non-increasing offset lists of the actor's q firings, stepping down by one at each chosen
    cut (a fed firing), at most `max_offset` cuts, and the lists cutting m times at every fed
    firing (m <= max_offset: each return of a frame m frames apart); all zeros first."""
    fed = fed_firings(g, actor, q)
    out = []
    for k in range(max_offset + 1):
        for cuts in combinations_with_replacement(fed, k):
            out.append([sum(1 for c in cuts if c > i) for i in range(q)])
    for m in range(1, max_offset + 1):
        every = [m * sum(1 for c in fed if c > i) for i in range(q)]
        if every not in out:
            out.append(every)
    return out


def level_offsets(g: CsdfGraph, q: dict[str, int], actors: list[str]
                  ) -> list[dict[str, list[int]]]:
    """Offsets from a software pipeline of the whole graph: firing (a, i) is at level = the most
    hops between actors on a path of one iteration's data (channels without initial tokens) to
    it, and gets offset (top level - its level) // s for s = 1, 2, ...: a consumer on another
    actor then runs a round later than its producer (s = 1), so no round waits on itself.
    Levels never decrease along an actor's firings, so offsets never increase. Largest s (fewest
    frames in flight) first; none if the data of one iteration has a cycle."""

    dag = nx.DiGraph()
    for a in g.actors:
        dag.add_nodes_from((a.name, i) for i in range(q[a.name]))
        dag.add_edges_from((((a.name, i), (a.name, i + 1)) for i in range(q[a.name] - 1)),
                           w=0)
    for c in g.channels:
        if c.initial_tokens or c.src == c.dst or q[c.src] != len(c.production) \
                or q[c.dst] != len(c.consumption):
            continue  # back channels, self-loops, several cycles per iteration: no level order
        for i, x in enumerate(c.production):
            for j, y in enumerate(c.consumption):
                if x and y:
                    dag.add_edge((c.src, i), (c.dst, j), w=1)
    if not nx.is_directed_acyclic_graph(dag):
        return []
    level: dict = {}
    for v in nx.topological_sort(dag):
        level[v] = max((level[u] + dag.edges[u, v]["w"] for u in dag.predecessors(v)), default=0)
    top = max(level.values(), default=0)
    out = []
    for s in range(top, 0, -1):
        trial = {a: [(top - level[(a, i)]) // s for i in range(q[a])] for a in actors}
        # an actor alone on its processor runs the same sequence whatever offset all its
        # firings share: keep the last firing at 0, as every order here has it
        trial = {a: [o - o_[-1] for o in o_] for a, o_ in trial.items()}
        if any(any(o) for o in trial.values()) and trial not in out:
            out.append(trial)
    return out


def interleavable(g: CsdfGraph, q: dict[str, int]) -> list[str]:
    """Actors a firing order may interleave: alone on their processor, concurrency 1, several
    firings per iteration, on a processor without a static order."""
    count: dict[str | None, int] = {}
    for a in g.actors:
        count[a.processor] = count.get(a.processor, 0) + 1
    return [a.name for a in g.actors if a.processor is not None and count[a.processor] == 1
            and a.concurrency == 1 and q[a.name] > 1 and a.processor not in g.static_order]


def best_interleaving(g: CsdfGraph, max_offset: int = 2, passes: int = 3,
                      time_limit: float | None = None) -> InterleavedOrders:
    """Firing orders for the interleavable actors of `g` that minimise the analysed period (a
    local optimum of the coordinate descent described above; never worse than no interleaving;
    with `time_limit` seconds, the best found when the descent runs out of it). Raises what
    throughput_mcr raises for `g` itself."""

    deadline = None if time_limit is None else time.perf_counter() + time_limit
    plain = throughput_mcr(g)
    q = repetition_vector(g)
    actors = interleavable(g, q)
    proc = {a.name: a.processor for a in g.actors}
    current: dict[str, list[int]] = {a: [0] * q[a] for a in actors}
    best = plain

    def orders_of(offsets: dict[str, list[int]]) -> FiringOrders:
        return {proc[a]: offsets_order(a, o) for a, o in offsets.items() if any(o)}

    # round trips through several actors need them all interleaved at once, which one actor
    # at a time cannot find: start from the best of the level-based orders
    # (the deepest pipeline first, which the time limit must not cut off: it removes every
    # round trip; then fewest frames in flight first, ties keeping the fewest)
    trials = level_offsets(g, q, actors)
    ahead = lambda offs: max(o[0] for o in offs.values())  # noqa: E731
    for n, trial in enumerate(trials[-1:] + trials[:-1]):
        if n and deadline is not None and time.perf_counter() > deadline:
            break
        try:
            res = throughput_mcr(g, orders_of(trial))
        except DeadlockError:
            continue
        if res.period < best.period * (1 - 1e-12) or (
                res.period <= best.period * (1 + 1e-12)
                and any(any(o) for o in current.values()) and ahead(trial) < ahead(current)):
            best, current = res, trial

    for _ in range(passes):
        improved = False
        for a in actors:
            for cand in candidate_offsets(g, a, q[a], max_offset):
                if deadline is not None and time.perf_counter() > deadline:
                    return InterleavedOrders(orders_of(current), current, best, plain)
                if cand == current[a]:
                    continue
                trial = {**current, a: cand}
                try:
                    res = throughput_mcr(g, orders_of(trial))
                except DeadlockError:
                    continue
                if res.period < best.period * (1 - 1e-12):
                    best, current, improved = res, trial, True
        if not improved:
            break
    return InterleavedOrders(orders_of(current), current, best, plain)
