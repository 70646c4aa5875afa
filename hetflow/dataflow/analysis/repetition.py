"""Repetition vector of a (C)SDF graph: how often each actor fires in one graph iteration.

We count *firings* (phases fired), as Bilsen et al. (1996) do: an actor with P phases that runs
its phase cycle r times per iteration has q = r * P. The smallest q is r * P where r is the
smallest positive integer solution of the balance equations written per phase cycle,
r[src] * sum(production) == r[dst] * sum(consumption) for every channel. Each weakly connected
component gets its own smallest solution; one graph iteration is one iteration of every component.
"""
from __future__ import annotations

import math
from collections import deque
from fractions import Fraction

from hetflow.errors import InputError

from hetflow.dataflow.graphs import CsdfGraph


def repetition_vector(g: CsdfGraph) -> dict[str, int]:
    """Firings per iteration of every actor (a multiple of its phase count), in actor order.

    Raises InputError naming a channel whose rates cannot be balanced.
    """
    g.validate()
    phases = {a.name: a.phases for a in g.actors}
    neighbours: dict[str, list] = {a.name: [] for a in g.actors}
    for c in g.channels:
        neighbours[c.src].append(c)
        neighbours[c.dst].append(c)

    cycles: dict[str, Fraction] = {}
    for start in phases:
        if start in cycles:
            continue
        component = _solve_component(start, neighbours, cycles)
        scale = math.lcm(*(cycles[a].denominator for a in component))
        ints = [int(cycles[a] * scale) for a in component]
        common = math.gcd(*ints)
        for a, r in zip(component, ints):
            cycles[a] = Fraction(r // common)
    return {a.name: int(cycles[a.name]) * phases[a.name] for a in g.actors}


def _solve_component(start: str, neighbours: dict[str, list], cycles: dict[str, Fraction]
                     ) -> list[str]:
    """Propagate relative phase-cycle counts from `start`; check every channel on the way."""
    cycles[start] = Fraction(1)
    component, todo = [start], deque([start])
    while todo:
        a = todo.popleft()
        for c in neighbours[a]:
            produced, consumed = sum(c.production), sum(c.consumption)
            if c.src in cycles and c.dst in cycles:
                if cycles[c.src] * produced != cycles[c.dst] * consumed:
                    raise InputError(
                        f"channel {c.name!r} ({c.src} -> {c.dst}) breaks the balance equations: "
                        f"{c.src} would produce {cycles[c.src] * produced} tokens per iteration "
                        f"where {c.dst} consumes {cycles[c.dst] * consumed}; the graph is "
                        f"inconsistent")
                continue
            if c.src in cycles:
                other, value = c.dst, cycles[c.src] * produced / consumed
            else:
                other, value = c.src, cycles[c.dst] * consumed / produced
            cycles[other] = value
            component.append(other)
            todo.append(other)
    return component
