"""Liveness by symbolic execution of one graph iteration (Lee & Messerschmitt 1987; Bilsen 1996).

Firings are executed one at a time, untimed, each actor at most its repetition count: a firing may
start when every input channel holds the tokens its phase consumes, every bounded output channel
has free space for what it will produce, and it is the actor's turn in its processor's static
order. All constraints of graphs.py are token-like (monotone), so the graph runs for ever without
deadlock exactly when this completes one iteration; concurrency never matters untimed.

At a firing's start its input tokens (and the space they occupy) are released before the space for
its outputs is claimed, so a bounded self-loop can reuse the space it frees.
"""
from __future__ import annotations

from typing import Iterable

from hetflow.errors import DeadlockError

from hetflow.dataflow.graphs import CsdfGraph
from hetflow.dataflow.analysis.orders import processor_schedules
from hetflow.dataflow.analysis.repetition import repetition_vector


def check_liveness(g: CsdfGraph, ordered: Iterable[str] = ()) -> None:
    """Return if the graph can run one iteration (hence for ever); raise DeadlockError if not.
    Processors in `ordered` have a firing order (orders.py), which this leaves to the analyses:
    their actors may interleave here.

    The error message names every blocked actor and what it waits for: tokens on a channel, space
    on a bounded channel, or its turn in a processor's static order. The same information is on
    the exception as `blocked: dict[actor, reason]`.
    """
    sequential_schedule(g, ordered)


def sequential_schedule(g: CsdfGraph, ordered: Iterable[str] = ()) -> list[str]:
    """The actors of one iteration's firings in an order that one processor could run them (each
    actor as often as its repetition count); it respects capacities and static orders, so its
    restriction to a processor's actors is a valid static order. DeadlockError if none exists."""
    q = repetition_vector(g)
    schedules = processor_schedules(g, q, ordered)
    run = _SymbolicRun(g, q, schedules)
    run.execute()
    if run.fired == run.total:
        return run.sequence
    blocked = {a.name: run.wait_reason(a.name) for a in g.actors if run.count[a.name] < q[a.name]}
    detail = "; ".join(f"actor {a!r} waits for {why}" for a, why in blocked.items())
    err = DeadlockError(f"graph {g.name!r} deadlocks after {run.fired} of the {run.total} "
                        f"firings of one iteration: {detail}")
    err.blocked = blocked
    raise err


class _SymbolicRun:
    def __init__(self, g: CsdfGraph, q: dict[str, int],
                 schedules: dict[str, list[tuple[str, int]]]):
        self.g, self.q = g, q
        self.actor = {a.name: a for a in g.actors}
        self.inputs = {a.name: [] for a in g.actors}
        self.outputs = {a.name: [] for a in g.actors}
        for c in g.channels:
            self.inputs[c.dst].append(c)
            self.outputs[c.src].append(c)
        self.tokens = {c.name: c.initial_tokens for c in g.channels}
        self.schedules = schedules
        self.turn = {p: 0 for p in schedules}
        self.count = {a.name: 0 for a in g.actors}
        self.fired, self.total = 0, sum(q.values())
        self.sequence: list[str] = []

    def execute(self) -> None:
        progress = True
        while progress:
            progress = False
            for name in self.actor:
                while self.count[name] < self.q[name] and self.wait_reason(name) is None:
                    self.fire(name)
                    progress = True

    def wait_reason(self, name: str) -> str | None:
        """What keeps the next firing of `name` from starting, or None if it can start."""
        a = self.actor[name]
        phase = self.count[name] % a.phases
        proc = a.processor
        if proc in self.schedules:
            order = self.schedules[proc]
            nxt = order[self.turn[proc]][0]
            if nxt != name:
                return f"its turn in the static order of processor {proc!r} (next: {nxt!r})"
        for c in self.inputs[name]:
            need = c.consumption[phase]
            if self.tokens[c.name] < need:
                return f"tokens on channel {c.name!r} (has {self.tokens[c.name]}, needs {need})"
        for c in self.outputs[name]:
            if c.capacity is None:
                continue
            freed = c.consumption[phase] if c.dst == name else 0
            occupied = self.tokens[c.name] - freed
            if occupied + c.production[phase] > c.capacity:
                return (f"space on channel {c.name!r} (capacity {c.capacity}, occupied "
                        f"{occupied}, needs {c.production[phase]})")
        return None

    def fire(self, name: str) -> None:
        a = self.actor[name]
        phase = self.count[name] % a.phases
        for c in self.inputs[name]:
            self.tokens[c.name] -= c.consumption[phase]
        for c in self.outputs[name]:
            self.tokens[c.name] += c.production[phase]
        if a.processor in self.schedules:
            self.turn[a.processor] = (self.turn[a.processor] + 1) % len(self.schedules[a.processor])
        self.count[name] += 1
        self.fired += 1
        self.sequence.append(name)
