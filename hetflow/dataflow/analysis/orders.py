"""Static orders of processors, checked against the repetition vector.

The r-th occurrence of actor `a` in `static_order[p]` is firing r (0-based, within one iteration)
of `a`; processor `p` runs the listed firings one after the other and repeats the list for ever.
A processor without a static order constrains nothing: an actor alone on it is bounded by its
`concurrency` only (hetflow names a group of replicas as one processor, with concurrency k).
"""
from __future__ import annotations

from collections import Counter

from hetflow.errors import InputError

from ..graphs import CsdfGraph


def processor_schedules(g: CsdfGraph, q: dict[str, int]) -> dict[str, list[tuple[str, int]]]:
    """Per processor, its firings `(actor, firing index)` in static order, one iteration long.

    Raises InputError where an order lists an actor a number of times other than its repetition
    count, leaves out an actor mapped on its processor, or where actors share a processor that has
    no static order (their interleaving would be undefined).
    """
    on_processor: dict[str, list[str]] = {}
    for a in g.actors:
        if a.processor is not None:
            on_processor.setdefault(a.processor, []).append(a.name)
    for proc, names in on_processor.items():
        if len(names) > 1 and proc not in g.static_order:
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
