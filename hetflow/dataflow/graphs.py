"""Timed SDF and CSDF graphs: the objects every dataflow analysis in hetflow works on.

Semantics (Bilsen et al. 1996; Lee & Messerschmitt 1987):
- an actor has `len(exec_times)` phases and fires them cyclically; firing phase p of actor a
  consumes `consumption[p]` tokens from every input channel at its start and produces
  `production[p]` tokens on every output channel at its end (`exec_times[p]` seconds later);
- a channel holds `initial_tokens` at time 0; with a `capacity` it is a bounded FIFO: a producer
  phase may only start when the space for what it will produce is free (space is claimed at the
  start of the firing, released when the consumer starts its firing);
- tokens produced on a channel become visible to the consumer `transfer_time` seconds after
  the end of the producing firing (a communication delay that does not occupy either actor);
- `concurrency` bounds how many firings of one actor may overlap (1: none, the usual case;
  k: k identical replicas taking firings in turn; None: unbounded);
- actors sharing a `processor` are serialised in `static_order[processor]`, a list of actor
  names giving the order of their firings within one graph iteration (each actor appears as many
  times as its repetition count), repeated for ever.
An SDF graph is a CSDF graph whose actors all have one phase.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from hetflow.errors import InputError


@dataclass
class Actor:
    name: str
    exec_times: list[float]  # seconds, one per phase
    processor: str | None = None
    concurrency: int | None = 1
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def phases(self) -> int:
        return len(self.exec_times)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "exec_times": list(self.exec_times), "processor": self.processor,
                "concurrency": self.concurrency, "attrs": self.attrs}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Actor":
        return Actor(d["name"], [float(t) for t in d["exec_times"]], d.get("processor"),
                     d.get("concurrency", 1), d.get("attrs", {}))


@dataclass
class Channel:
    name: str
    src: str
    dst: str
    production: list[int]  # one entry per phase of src
    consumption: list[int]  # one entry per phase of dst
    initial_tokens: int = 0
    capacity: int | None = None  # tokens; None = unbounded
    transfer_time: float = 0.0  # seconds from end of production to visibility at dst
    attrs: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "src": self.src, "dst": self.dst,
                "production": list(self.production), "consumption": list(self.consumption),
                "initial_tokens": self.initial_tokens, "capacity": self.capacity,
                "transfer_time": self.transfer_time, "attrs": self.attrs}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Channel":
        return Channel(d["name"], d["src"], d["dst"], [int(x) for x in d["production"]],
                       [int(x) for x in d["consumption"]], int(d.get("initial_tokens", 0)),
                       d.get("capacity"), float(d.get("transfer_time", 0.0)), d.get("attrs", {}))


@dataclass
class CsdfGraph:
    name: str
    actors: list[Actor]
    channels: list[Channel]
    static_order: dict[str, list[str]] = field(default_factory=dict)

    def actor(self, name: str) -> Actor:
        for a in self.actors:
            if a.name == name:
                return a
        raise KeyError(name)

    @property
    def is_sdf(self) -> bool:
        return all(a.phases == 1 for a in self.actors)

    def validate(self) -> None:
        """Raise InputError on structural problems (unknown actors, wrong sequence lengths)."""

        names = [a.name for a in self.actors]
        if len(set(names)) != len(names):
            raise InputError(f"graph {self.name!r}: duplicate actor names")
        by_name = {a.name: a for a in self.actors}
        for a in self.actors:
            if a.phases < 1:
                raise InputError(f"actor {a.name!r} has no phases")
            if any(t < 0 for t in a.exec_times):
                raise InputError(f"actor {a.name!r} has a negative execution time")
        for c in self.channels:
            for end in (c.src, c.dst):
                if end not in by_name:
                    raise InputError(f"channel {c.name!r} names unknown actor {end!r}")
            if len(c.production) != by_name[c.src].phases:
                raise InputError(f"channel {c.name!r}: production sequence has {len(c.production)}"
                                 f" entries but actor {c.src!r} has {by_name[c.src].phases} phases")
            if len(c.consumption) != by_name[c.dst].phases:
                raise InputError(f"channel {c.name!r}: consumption sequence has "
                                 f"{len(c.consumption)} entries but actor {c.dst!r} has "
                                 f"{by_name[c.dst].phases} phases")
            if any(x < 0 for x in c.production + c.consumption) or c.initial_tokens < 0:
                raise InputError(f"channel {c.name!r} has a negative rate or token count")
            if sum(c.production) == 0 or sum(c.consumption) == 0:
                raise InputError(f"channel {c.name!r} never produces or never consumes")
            if c.capacity is not None and c.capacity < c.initial_tokens:
                raise InputError(f"channel {c.name!r}: capacity {c.capacity} is below its "
                                 f"{c.initial_tokens} initial tokens")
        for proc, order in self.static_order.items():
            for n in order:
                if n not in by_name:
                    raise InputError(f"static order of {proc!r} names unknown actor {n!r}")
                if by_name[n].processor != proc:
                    raise InputError(f"static order of {proc!r} names actor {n!r}, which is "
                                     f"mapped on {by_name[n].processor!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "actors": [a.to_dict() for a in self.actors],
                "channels": [c.to_dict() for c in self.channels],
                "static_order": {k: list(v) for k, v in self.static_order.items()}}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "CsdfGraph":
        return CsdfGraph(d["name"], [Actor.from_dict(a) for a in d["actors"]],
                         [Channel.from_dict(c) for c in d["channels"]],
                         {k: list(v) for k, v in d.get("static_order", {}).items()})


# An SDF graph is a CSDF graph with one phase per actor; the alias keeps call sites readable.
SdfGraph = CsdfGraph
