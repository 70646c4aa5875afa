"""Static orders of processors, checked against the repetition vector.

The r-th occurrence of actor `a` in `static_order[p]` is firing r (0-based, within one iteration)
of `a`; processor `p` runs the listed firings one after the other and repeats the list for ever.
A processor without a static order constrains nothing: an actor alone on it is bounded by its
`concurrency` only (hetflow names a group of replicas as one processor, with concurrency k).

A *firing order* (`Firing`, `FiringOrders`) is a static order whose entries may belong to other
iterations (frames) than the round's own: the K-periodic / software-pipelined schedules that
interleave the phases of consecutive frames. It is plain data, given to the analysis beside the
graph, and what a runtime runs per processor.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from hetflow.errors import InputError

from hetflow.dataflow.graphs import CsdfGraph
from dataclasses import replace


def processor_schedules(g: CsdfGraph, q: dict[str, int], ordered: Iterable[str] = ()
                        ) -> dict[str, list[tuple[str, int]]]:
    """Per processor, its firings `(actor, firing index)` in static order, one iteration long.

    Raises InputError where an order lists an actor a number of times other than its repetition
    count, leaves out an actor mapped on its processor, or where actors share a processor that has
    no static order (their interleaving would be undefined) and is not one of `ordered` (the
    processors given a firing order).
    """
    ordered = set(ordered)
    on_processor: dict[str, list[str]] = {}
    for a in g.actors:
        if a.processor is not None:
            on_processor.setdefault(a.processor, []).append(a.name)
    for proc, names in on_processor.items():
        if len(names) > 1 and proc not in g.static_order and proc not in ordered:
            raise InputError(f"actors {', '.join(map(repr, names))} share processor {proc!r} "
                             f"but the graph has no static_order for it")

    schedules = {}
    for proc, order in g.static_order.items():
        counts = Counter(order)
        for name in on_processor.get(proc, []):
            if counts[name] != q[name]:
                raise InputError(f"static order of {proc!r} lists actor {name!r} {counts[name]} "
                                 f"times but it fires {q[name]} times per iteration")
        seen: Counter = Counter()
        firings = []
        for name in order:
            firings.append((name, seen[name]))
            seen[name] += 1
        if firings:
            schedules[proc] = firings
    return schedules


@dataclass(frozen=True)
class Firing:
    """One entry of a processor's frame-interleaved firing order: firing `firing` (0-based within
    one iteration; for a graph of `CsdfApp.to_graph`, where an iteration is one frame, the phase)
    of `actor`, for the frame `frame_offset` iterations ahead of the round's own.

    A processor with order [f_0, ..., f_{m-1}] runs, in round r = 0, 1, 2, ..., the firings f_j
    of iteration r + f_j.frame_offset one after the other, skipping those of iterations that do
    not exist (below 0 or past the last frame). Offsets (1, 0) on phases (0, 1) make the
    processor run phase 0 of frame f + 1 before phase 1 of frame f: a frame that goes elsewhere
    between its two phases no longer stalls the processor for the round trip.
    """

    actor: str
    firing: int
    frame_offset: int = 0


FiringOrders = dict[str, tuple[Firing, ...]]  # processor -> its cyclic order of one round


def check_firing_orders(g: CsdfGraph, q: dict[str, int], orders: FiringOrders) -> None:
    """InputError unless each order lists every firing of one iteration of the actors mapped on
    its processor exactly once, the actors have concurrency 1, and the processor has no
    `static_order` as well."""
    for proc, order in orders.items():
        if proc in g.static_order:
            raise InputError(f"processor {proc!r} has both a static order and a firing order")
        names = {a.name for a in g.actors if a.processor == proc}
        seen = set()
        for f in order:
            if f.actor not in names:
                raise InputError(f"firing order of {proc!r} names actor {f.actor!r}, which is "
                                 f"not mapped on it")
            if not 0 <= f.firing < q[f.actor]:
                raise InputError(f"firing order of {proc!r}: actor {f.actor!r} has no firing "
                                 f"{f.firing} (it fires {q[f.actor]} times per iteration)")
            if (f.actor, f.firing) in seen:
                raise InputError(f"firing order of {proc!r} lists firing {f.firing} of "
                                 f"{f.actor!r} twice")
            seen.add((f.actor, f.firing))
        for name in names:
            a = g.actor(name)
            missing = [i for i in range(q[name]) if (name, i) not in seen]
            if missing:
                raise InputError(f"firing order of {proc!r} leaves out firing {missing[0]} of "
                                 f"{name!r}")
            if a.concurrency != 1:
                raise InputError(f"firing order of {proc!r}: actor {name!r} has concurrency "
                                 f"{a.concurrency}; a firing order serialises its processor")


def unfolded(g: CsdfGraph, k: int) -> CsdfGraph:
    """`g` with k of its iterations as one: every actor's phases, and every channel's rates,
    repeated k times (firing i of the unfolded graph is firing i mod q of original iteration
    i // q, q the original firings per iteration). A firing order of the unfolded graph can then
    visit the same phase of k frames before the next phase of any. Actors must have concurrency
    1: a replicated actor's cycle would otherwise become k frames on one replica."""

    if k == 1:
        return g
    for a in g.actors:
        if a.concurrency != 1:
            raise InputError(f"graph {g.name!r}: actor {a.name!r} has concurrency "
                             f"{a.concurrency}; only a graph of concurrency-1 actors unfolds")
    if g.static_order:
        raise InputError(f"graph {g.name!r}: unfolding a graph with static orders is not "
                         "supported")
    return CsdfGraph(g.name, [replace(a, exec_times=list(a.exec_times) * k) for a in g.actors],
                     [replace(c, production=list(c.production) * k,
                              consumption=list(c.consumption) * k) for c in g.channels])
