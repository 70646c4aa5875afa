"""SDF3 XML export and import (the exchange format of SDF3, Kiter and PREESM).

The standard part follows SDF3's schema (sdf3-sdf.xsd / sdf3-csdf.xsd):
`<sdf3 type="sdf|csdf" version="1.0">`, `<applicationGraph>` with `<sdf|csdf>` (actors with ports
whose `rate` is a comma-separated sequence for CSDF, channels with `initialTokens`) and
`<sdfProperties|csdfProperties>` (per actor a default `<processor>` with `<executionTime>`, one
time per phase).

Time: SDF3 counts execution times in integer time units. We export `round(t / time_unit)`
(default unit 1e-6 s, microseconds), so a time is off by at most half a unit after a round trip,
and a non-zero time below half a unit becomes 0. Import multiplies by the unit.

The application graph written is `plain_graph(g)`: hetflow's transfer times, capacities (space
freed when the consumer *starts*), concurrency bounds and static orders rewritten as actors and
channels with initial tokens, so that SDF3 or Kiter, reading only the standard part, compute the
period hetflow's analysis computes (see `plain_graph` for each construction and for what it
refuses). No `bufferSize` is written: SDF3 frees that space when the consumer *ends*.

hetflow's own compact graph (with processors, capacities, transfer times, static orders; times
in time units) goes in `<settings type="hetflow">`, which the schema leaves free and other tools
ignore; `from_sdf3_xml` reads it back when present. A file without it is read with plain SDF3
semantics: concurrency None, no capacities (a `bufferSize` is not hetflow's capacity and is
ignored), no processors. `attrs` dictionaries survive only in the settings block.
"""
from __future__ import annotations

import json
import math
import os
import xml.etree.ElementTree as ET
from decimal import Decimal
from pathlib import Path
from typing import Callable

from hetflow.errors import InputError
from hetflow.io import atomic_write_text

from hetflow.dataflow.graphs import Actor, Channel, CsdfGraph
from hetflow.dataflow.analysis.hsdf import Expander
from hetflow.dataflow.analysis.orders import processor_schedules
from hetflow.dataflow.analysis.repetition import repetition_vector

DEFAULT_TIME_UNIT = 1e-6
CONCURRENCY_SUFFIX = "__concurrency"
_XSI = "http://www.w3.org/2001/XMLSchema-instance"


def to_sdf3_xml(g: CsdfGraph, time_unit: float = DEFAULT_TIME_UNIT) -> str:
    """The graph as SDF3 XML text, times rounded to integer multiples of `time_unit` seconds.

    The application graph is `plain_graph(g)`: the model hetflow analyses, in constructs other
    tools read. hetflow's own compact graph goes in `<settings type="hetflow">` for round trips.
    """
    plain = plain_graph(g)
    if not time_unit > 0:
        raise InputError(f"SDF3 export of graph {g.name!r}: time unit must be positive")
    names = [c.name for c in g.channels]
    if len(set(names)) != len(names):
        raise InputError(f"SDF3 export of graph {g.name!r}: duplicate channel names")
    kind = "sdf" if plain.is_sdf else "csdf"

    def units(times) -> list[int]:
        return [round(t / time_unit) for t in times]

    root = ET.Element("sdf3", {"type": kind, "version": "1.0"})
    root.set("xmlns:xsi", _XSI)
    root.set("xsi:noNamespaceSchemaLocation", f"http://www.es.ele.tue.nl/sdf3/xsd/sdf3-{kind}.xsd")
    app = ET.SubElement(root, "applicationGraph", {"name": g.name})
    graph = ET.SubElement(app, kind, {"name": g.name, "type": g.name})
    for a in plain.actors:
        actor = ET.SubElement(graph, "actor", {"name": a.name, "type": a.name})
        for c in plain.channels:
            if c.dst == a.name:
                ET.SubElement(actor, "port", {"name": f"in_{c.name}", "type": "in",
                                              "rate": _seq(c.consumption)})
            if c.src == a.name:
                ET.SubElement(actor, "port", {"name": f"out_{c.name}", "type": "out",
                                              "rate": _seq(c.production)})
    for c in plain.channels:
        ET.SubElement(graph, "channel", {
            "name": c.name, "srcActor": c.src, "srcPort": f"out_{c.name}", "dstActor": c.dst,
            "dstPort": f"in_{c.name}", "initialTokens": str(c.initial_tokens)})

    props = ET.SubElement(app, f"{kind}Properties")
    processor = {a.name: a.processor for a in g.actors}
    for a in plain.actors:
        actor = ET.SubElement(props, "actorProperties", {"actor": a.name})
        proc = ET.SubElement(actor, "processor", {"type": processor.get(a.name) or "default",
                                                  "default": "true"})
        ET.SubElement(proc, "executionTime", {"time": _seq(units(a.exec_times))})

    settings = ET.SubElement(root, "settings", {"type": "hetflow"})
    ET.SubElement(settings, "timeUnit", {"seconds": repr(float(time_unit))})
    compact = g.to_dict()
    for a in compact["actors"]:
        a["exec_times"] = units(a["exec_times"])  # like the standard part, in time units
    ET.SubElement(settings, "graph").text = json.dumps(compact, sort_keys=True)
    ET.indent(root, "  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_sdf3(g: CsdfGraph, path: str | os.PathLike,
               time_unit: float = DEFAULT_TIME_UNIT) -> None:
    """Write `to_sdf3_xml(g)` to `path` atomically (a temporary file renamed into place)."""
    text = to_sdf3_xml(g, time_unit)
    atomic_write_text(path, text)


def read_sdf3(path: str | os.PathLike, time_unit: float | None = None) -> CsdfGraph:
    """`from_sdf3_xml` of a file; InputError names the file if it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot read SDF3 file {str(path)!r}: {e.strerror}") from None
    try:
        return from_sdf3_xml(text, time_unit)
    except InputError as e:
        raise InputError(f"{path}: {e}") from None


def from_sdf3_xml(text: str, time_unit: float | None = None) -> CsdfGraph:
    """Read an SDF3 (SDF or CSDF) application graph.

    Execution times (integers or decimals in SDF3 time units) are multiplied by `time_unit`
    seconds; by default the unit recorded by hetflow's export, else 1e-6. Of several processor
    types the default one is used (the last marked default, as SDF3 does, else the first).
    Without hetflow settings actors get concurrency None (SDF3's semantics) and no processor.
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise InputError(f"SDF3 XML is not well-formed: {e}") from None
    if root.tag != "sdf3":
        raise InputError(f"not an SDF3 document: root element is <{root.tag}>")
    app = _child(root, "applicationGraph")
    graph = next((e for e in app if e.tag in ("sdf", "csdf")), None)
    if graph is None:
        raise InputError("SDF3 XML: <applicationGraph> has no <sdf> or <csdf> graph")
    props = next((e for e in app if e.tag in ("sdfProperties", "csdfProperties")), None)
    settings = next((e for e in root.findall("settings") if e.get("type") == "hetflow"), None)
    if time_unit is None:
        unit = settings.find("timeUnit") if settings is not None else None
        time_unit = float(unit.get("seconds")) if unit is not None else DEFAULT_TIME_UNIT
    compact = settings.find("graph") if settings is not None else None
    if compact is not None:
        return _compact_graph(compact.text or "", time_unit)

    ports: dict[tuple[str, str], tuple[str, list[int]]] = {}
    actor_names = []
    for actor in graph.findall("actor"):
        name = _attr(actor, "name")
        actor_names.append(name)
        for port in actor.findall("port"):
            what = f"rate of port {port.get('name')!r} of actor {name!r}"
            rates = [_integer(r, what) for r in _sequence(_attr(port, "rate"), what)]
            ports[(name, _attr(port, "name"))] = (_attr(port, "type"), rates)

    times = {name: [0] for name in actor_names}
    for ap in (props.findall("actorProperties") if props is not None else []):
        procs = ap.findall("processor")
        defaults = [p for p in procs if p.get("default") is not None]
        chosen = defaults[-1] if defaults else (procs[0] if procs else None)
        exec_node = chosen.find("executionTime") if chosen is not None else None
        if exec_node is not None:
            name = _attr(ap, "actor")
            what = f"execution time of actor {name!r}"
            times[name] = [_number(t, what) for t in _sequence(_attr(exec_node, "time"), what)]
    raw_channels = []
    for ch in graph.findall("channel"):
        name = _attr(ch, "name")
        src, dst = _attr(ch, "srcActor"), _attr(ch, "dstActor")
        out_type, prod = _port(ports, src, _attr(ch, "srcPort"), name)
        in_type, cons = _port(ports, dst, _attr(ch, "dstPort"), name)
        if out_type != "out" or in_type != "in":
            raise InputError(f"SDF3 channel {name!r} must go from an out port to an in port")
        tokens = _integer(ch.get("initialTokens", "0"), f"initialTokens of channel {name!r}")
        raw_channels.append((name, src, dst, prod, cons, tokens))

    phases = {}
    for name in actor_names:
        lengths = [len(times[name])]
        lengths += [len(r) for (a, _), (_, r) in ports.items() if a == name]
        phases[name] = math.lcm(*lengths)

    def cyclic(seq: list, n: int) -> list:
        return [seq[i % len(seq)] for i in range(n)]

    actors = [Actor(name, [float(t * Decimal(repr(float(time_unit))))
                           for t in cyclic(times[name], phases[name])], None, None)
              for name in actor_names]
    channels = [Channel(name, src, dst, cyclic(prod, phases[src]), cyclic(cons, phases[dst]),
                        tokens)
                for name, src, dst, prod, cons, tokens in raw_channels]
    g = CsdfGraph(app.get("name") or graph.get("name") or "sdf3", actors, channels)
    g.validate()
    return g


def _compact_graph(text: str, time_unit: float) -> CsdfGraph:
    """hetflow's own graph from its settings block, execution times in time units."""
    try:
        d = json.loads(text)
        for a in d["actors"]:
            a["exec_times"] = [float(_number(str(t), f"execution time of {a['name']!r}")
                                     * Decimal(repr(float(time_unit)))) for t in a["exec_times"]]
        g = CsdfGraph.from_dict(d)
    except (ValueError, KeyError, TypeError) as e:
        raise InputError(f"SDF3 XML: hetflow's <graph> setting is malformed: {e}") from None
    g.validate()
    return g


def _sequence(text: str, what: str) -> list[str]:
    """Elements of an SDF3 sequence: comma-separated, `n*x` standing for n copies of x."""
    out = []
    for element in text.split(","):
        count, star, value = element.partition("*")
        if star:
            out += [value.strip()] * _integer(count, f"repeat count in the {what}")
        else:
            out.append(element.strip())
    return out


def _seq(values) -> str:
    return ",".join(str(v) for v in values)


def _unique(name: str, taken: list[str]) -> str:
    candidate, i = name, 1
    while candidate in taken:
        candidate, i = f"{name}{i}", i + 1
    return candidate


def _child(node: ET.Element, tag: str) -> ET.Element:
    found = node.find(tag)
    if found is None:
        raise InputError(f"SDF3 XML: <{node.tag}> has no <{tag}>")
    return found


def _attr(node: ET.Element, name: str) -> str:
    value = node.get(name)
    if value is None:
        raise InputError(f"SDF3 XML: <{node.tag}> lacks attribute {name!r}")
    return value


def _integer(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise InputError(f"SDF3 XML: {what} is not an integer: {text!r}") from None


def _number(text: str, what: str) -> Decimal:
    try:
        value = Decimal(text.strip())
    except ArithmeticError:
        raise InputError(f"SDF3 XML: {what} is not a number: {text!r}") from None
    if not value.is_finite() or value < 0:
        raise InputError(f"SDF3 XML: {what} must be a finite non-negative number: {text!r}")
    return value


def _port(ports, actor: str, port: str, channel: str) -> tuple[str, list[int]]:
    if (actor, port) not in ports:
        raise InputError(f"SDF3 channel {channel!r} names unknown port {port!r} of actor "
                         f"{actor!r}")
    return ports[(actor, port)]


def plain_graph(g: CsdfGraph) -> CsdfGraph:
    """`g` rebuilt with plain (C)SDF constructs only, so that a tool knowing nothing of hetflow
    (SDF3, Kiter: actors that may overlap with themselves without limit, firings starting in
    order, tokens consumed at a firing's start and produced at its end) computes the same
    timing as hetflow's analysis of `g`. The result has no capacities, transfer times,
    concurrency bounds, processors or static orders; every constraint is a channel:

    - transfer time t of channel c: an actor `c__transfer` (one phase per producing phase of the
      source, time t each) between source and destination; the initial tokens sit after it
      (tokens already delivered). Its firings overlap freely and last equally long, so tokens
      reach the consumer in order, t after the end of the firing that made them.
    - capacity of channel c (space freed when the consumer *starts*, claimed when the producer
      starts): the consumer d is split into a zero-time actor `d__start` that consumes d's
      inputs, then hands a token to d (which keeps d's times and outputs). `d__start` ends when
      d starts, so a reverse channel `c__space` from `d__start` to the producer (or its own start
      actor) with capacity - initial tokens frees space exactly at d's start. A reverse channel
      from d itself would free it at d's end (SDF3's bufferSize semantics), later than hetflow.
      `d__start` starts in order and takes no time, so it also ends in order (no self-loop), and
      waits for the end of the firing k back of d (channel `d__concurrency`, k tokens) when d has
      concurrency k, so it starts exactly when hetflow starts d.
    - concurrency k: a channel `a__concurrency` from a to itself (or to `a__start`) with k
      tokens (firing n waits for the end of firing n - k); none if all of a's phases take zero
      time, as its firings then end when they start, in order. While firings end in start order
      (one phase, equal phase times, k = 1, or serialised by a static order) that is hetflow's
      meaning. Otherwise a count of ended firings no longer names one firing, and hetflow
      delivers tokens in firing order where plain CSDF delivers them as firings end; then a
      reports each phase's end on its own channel `a__donej` (firings of one phase end in
      order) to a zero-time actor `a__deliver` (starting in order, it ends in order) that
      produces a's outputs in firing order, and the concurrency channel is split per phase
      likewise (`a__concurrencyj`, from phase j to phase j + k). Cycle replicas of several
      phases start out of order, which a plain CSDF actor cannot; the export refuses them rather
      than write another model.
    - capacity of a self-loop: its space is freed by an earlier start of the same actor, which
      in-order starts already imply; nothing is written (a bound below one firing's claim is a
      deadlock and refused).
    - static order of a processor: the actors on it get one phase per firing of an iteration,
      and a channel `p__orderj` from the end of the j-th listed firing to the start of the next
      (one token on the wrap-around), exactly hetflow's order edges (but for one from a
      zero-time actor to its own next firing, which in-order starts imply).

    No self-loop is added to an actor that takes no time: it would constrain nothing (firings
    start in order) and would make a cycle of zero duration, on which cycle-ratio solvers that
    divide by a cycle's duration fail (Kiter's Howard iteration returns wrong periods there).

    Raises InputError for the cases above that have no plain equivalent here.
    """

    g.validate()
    q = repetition_vector(g)
    processor_schedules(g, q)  # orders that list each actor's firings of one iteration
    by_name = {a.name: a for a in g.actors}
    ordered = {n for order in g.static_order.values() for n in order}
    out_of_order = _out_of_order_actors(g, q, ordered)
    taken = [a.name for a in g.actors] + [c.name for c in g.channels]

    def fresh(name: str) -> str:
        name = _unique(name, taken)
        taken.append(name)
        return name

    phases = {a.name: q[a.name] if a.name in ordered else a.phases for a in g.actors}

    def ext(seq: list, name: str) -> list:
        return [seq[i % len(seq)] for i in range(phases[name])]

    split = {c.dst for c in g.channels if c.capacity is not None and c.src != c.dst}
    start = {n: fresh(f"{n}__start") for n in by_name if n in split}
    deliver = {n: fresh(f"{n}__deliver") for n in by_name if n in out_of_order}

    def exit_(name: str) -> str:  # the actor whose end delivers `name`'s tokens
        return deliver.get(name, name)

    def entry(name: str) -> str:  # the actor whose start is `name`'s start
        return start.get(name, name)

    actors = [Actor(a.name, [float(t) for t in ext(a.exec_times, a.name)], None, None)
              for a in g.actors]
    actors += [Actor(s, [0.0] * phases[n], None, None) for n, s in start.items()]
    actors += [Actor(d, [0.0] * phases[n], None, None) for n, d in deliver.items()]
    channels = []
    ones = {n: [1] * p for n, p in phases.items()}
    for c in g.channels:
        prod, cons = ext(c.production, c.src), ext(c.consumption, c.dst)
        if c.transfer_time > 0:
            moved = [x for x in c.production if x > 0]
            t = fresh(f"{c.name}__transfer")
            actors.append(Actor(t, [float(c.transfer_time)] * len(moved), None, None))
            channels.append(Channel(fresh(f"{c.name}__out"), exit_(c.src), t, prod, moved))
            channels.append(Channel(c.name, t, entry(c.dst), moved, cons, c.initial_tokens))
        else:
            channels.append(Channel(c.name, exit_(c.src), entry(c.dst), prod, cons,
                                    c.initial_tokens))
        if c.capacity is not None and c.src != c.dst:
            channels.append(Channel(fresh(f"{c.name}__space"), start[c.dst], entry(c.src), cons,
                                    prod, c.capacity - c.initial_tokens))
    for a in g.actors:
        if a.name in start:
            s = start[a.name]
            channels.append(Channel(fresh(f"{a.name}__go"), s, a.name, ones[a.name],
                                    ones[a.name]))
        if a.name in deliver:
            # one channel per phase: firings of one phase last equally long and start in
            # order, so they end in order, and a count on that channel names one firing
            d, n, k = deliver[a.name], a.phases, a.concurrency
            for j in range(n):
                one = [int(i == j) for i in range(n)]
                channels.append(Channel(fresh(f"{a.name}__done{j}"), a.name, d, one, one))
                if k is not None:  # firing m waits for the end of firing m - k
                    to = [int(i == (j + k) % n) for i in range(n)]
                    channels.append(Channel(fresh(f"{a.name}{CONCURRENCY_SUFFIX}{j}"), a.name,
                                            entry(a.name), one, to, (j + k) // n))
        elif a.concurrency is not None and any(t > 0 for t in a.exec_times):
            channels.append(Channel(fresh(f"{a.name}{CONCURRENCY_SUFFIX}"), a.name,
                                    entry(a.name), ones[a.name], ones[a.name], a.concurrency))
    channels += _order_channels(g, by_name, phases, entry, fresh)
    plain = CsdfGraph(g.name, actors, channels)
    plain.validate()
    return plain


def _out_of_order_actors(g: CsdfGraph, q: dict, ordered: set[str]) -> set[str]:
    """The actors of `g` whose firings may end out of start order (several phases of
    unequal times, several firings at once, no static order); raises InputError for
    what plain CSDF cannot express: cycle replicas of several phases, a self-loop bounded
    below one firing's claim."""

    out_of_order = set()  # actors whose firings may end out of start order
    for a in g.actors:
        k = a.concurrency
        if a.name in ordered or k == 1 or a.phases == 1:
            continue
        if a.attrs.get("replicate") == "cycle" and k is not None:
            raise InputError(f"SDF3 export of graph {g.name!r}: actor {a.name!r} is replicated "
                             f"{k} times over cycles of {a.phases} phases, which plain SDF3 "
                             f"cannot express without writing the replicas out")
        if len(set(a.exec_times)) > 1:
            out_of_order.add(a.name)
    expander = Expander(g, q)
    for c in g.channels:
        if c.capacity is None or c.src != c.dst:
            continue
        # a self-loop's space is freed by a start of its own actor: implied by in-order starts
        # when that firing is not a later one; a later one would be a deadlock
        e = expander.capacity_edges(c, c.capacity)
        if any(d < 0 or (d == 0 and u > v) for u, v, d in zip(e.src, e.dst, e.tokens)):
            raise InputError(f"SDF3 export of graph {g.name!r}: self-loop {c.name!r} is bounded "
                             f"below what one firing claims; the graph deadlocks")
    return out_of_order


def _order_channels(g: CsdfGraph, by_name: dict, phases: dict[str, int],
                    entry: Callable[[str], str], fresh: Callable[[str], str]) -> list:
    """One channel from the end of each firing of a processor's static order to the start
    of the next (one token on the wrap-around)."""
    channels = []
    for proc, order in g.static_order.items():
        if not order:
            continue
        seen: dict[str, int] = {}
        firings = []
        for n in order:
            firings.append((n, seen.get(n, 0)))
            seen[n] = seen.get(n, 0) + 1
        for j, (x, rx) in enumerate(firings):
            y, ry = firings[(j + 1) % len(firings)]
            if x == y and not any(by_name[x].exec_times):
                continue  # the next firing of a zero-time actor: in-order starts imply it
            prod = [int(i == rx) for i in range(phases[x])]
            cons = [int(i == ry) for i in range(phases[y])]
            channels.append(Channel(fresh(f"{proc}__order{j}"), x, entry(y), prod, cons,
                                    int(j + 1 == len(firings))))
    return channels
