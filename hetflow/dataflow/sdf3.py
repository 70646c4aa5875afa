"""SDF3 XML export and import (the exchange format of SDF3, Kiter and PREESM).

The standard part follows SDF3's schema (sdf3-sdf.xsd / sdf3-csdf.xsd):
`<sdf3 type="sdf|csdf" version="1.0">`, `<applicationGraph>` with `<sdf|csdf>` (actors with ports
whose `rate` is a comma-separated sequence for CSDF, channels with `initialTokens`) and
`<sdfProperties|csdfProperties>` (per actor a default `<processor>` with `<executionTime>`, per
bounded channel `<bufferSize sz=...>`).

Time: SDF3 counts execution times in integer time units. We export `round(t / time_unit)`
(default unit 1e-6 s, microseconds), so a time is off by at most half a unit after a round trip,
and a non-zero time below half a unit becomes 0. Import multiplies by the unit.

Semantics that SDF3 lacks or treats differently:
- SDF3 actors may overlap with themselves without limit. A finite `concurrency` k is exported as
  a self-loop channel `<actor>__concurrency` with k tokens, rate 1 per phase: SDF3 then bounds the
  overlap to k, as hetflow does (hetflow additionally hands firings to replicas in turn, which
  only differs for phases of unequal length). Graphs read from other tools get concurrency None.
- SDF3 frees buffer space when the consumer *ends*; hetflow frees it when the consumer *starts*
  (graphs.py), so other tools find slightly lower throughput for the same `bufferSize`.
- `transfer_time`, `processor`, `static_order` and the time unit have no place in the
  application graph; they go in a `<settings type="hetflow">` element (the schema allows any
  content there), which other tools ignore and `from_sdf3_xml` reads back.
- `attrs` dictionaries are not exported.
"""
from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from decimal import Decimal
from pathlib import Path

from hetflow.errors import InputError
from hetflow.io import atomic_write_text

from .graphs import Actor, Channel, CsdfGraph

DEFAULT_TIME_UNIT = 1e-6
CONCURRENCY_SUFFIX = "__concurrency"
_XSI = "http://www.w3.org/2001/XMLSchema-instance"


def to_sdf3_xml(g: CsdfGraph, time_unit: float = DEFAULT_TIME_UNIT) -> str:
    """The graph as SDF3 XML text, times rounded to integer multiples of `time_unit` seconds."""
    g.validate()
    if not time_unit > 0:
        raise InputError(f"SDF3 export of graph {g.name!r}: time unit must be positive")
    names = [c.name for c in g.channels]
    if len(set(names)) != len(names):
        raise InputError(f"SDF3 export of graph {g.name!r}: duplicate channel names")
    kind = "sdf" if g.is_sdf else "csdf"
    channels = list(g.channels)
    concurrency_channel = {}
    for a in g.actors:
        if a.concurrency is not None:
            name = _unique(f"{a.name}{CONCURRENCY_SUFFIX}", names)
            names.append(name)
            concurrency_channel[a.name] = name
            channels.append(Channel(name, a.name, a.name, [1] * a.phases, [1] * a.phases,
                                    a.concurrency))

    root = ET.Element("sdf3", {"type": kind, "version": "1.0"})
    root.set("xmlns:xsi", _XSI)
    root.set("xsi:noNamespaceSchemaLocation", f"http://www.es.ele.tue.nl/sdf3/xsd/sdf3-{kind}.xsd")
    app = ET.SubElement(root, "applicationGraph", {"name": g.name})
    graph = ET.SubElement(app, kind, {"name": g.name, "type": g.name})
    for a in g.actors:
        actor = ET.SubElement(graph, "actor", {"name": a.name, "type": a.name})
        for c in channels:
            if c.dst == a.name:
                ET.SubElement(actor, "port", {"name": f"in_{c.name}", "type": "in",
                                              "rate": _seq(c.consumption)})
            if c.src == a.name:
                ET.SubElement(actor, "port", {"name": f"out_{c.name}", "type": "out",
                                              "rate": _seq(c.production)})
    for c in channels:
        ET.SubElement(graph, "channel", {
            "name": c.name, "srcActor": c.src, "srcPort": f"out_{c.name}", "dstActor": c.dst,
            "dstPort": f"in_{c.name}", "initialTokens": str(c.initial_tokens)})

    props = ET.SubElement(app, f"{kind}Properties")
    for a in g.actors:
        actor = ET.SubElement(props, "actorProperties", {"actor": a.name})
        proc = ET.SubElement(actor, "processor", {"type": a.processor or "default",
                                                  "default": "true"})
        ET.SubElement(proc, "executionTime",
                      {"time": _seq([round(t / time_unit) for t in a.exec_times])})
    for c in g.channels:
        channel = ET.SubElement(props, "channelProperties", {"channel": c.name})
        if c.capacity is not None:
            ET.SubElement(channel, "bufferSize", {"sz": str(c.capacity)})

    settings = ET.SubElement(root, "settings", {"type": "hetflow"})
    ET.SubElement(settings, "timeUnit", {"seconds": repr(float(time_unit))})
    for a in g.actors:
        attrs = {"name": a.name,
                 "concurrency": "unbounded" if a.concurrency is None else str(a.concurrency)}
        if a.processor is not None:
            attrs["processor"] = a.processor
        if a.name in concurrency_channel:
            attrs["concurrencyChannel"] = concurrency_channel[a.name]
        ET.SubElement(settings, "actor", attrs)
    for c in g.channels:
        if c.transfer_time:
            ET.SubElement(settings, "channel", {"name": c.name,
                                                "transferTime": repr(float(c.transfer_time))})
    for proc, order in g.static_order.items():
        node = ET.SubElement(settings, "staticOrder", {"processor": proc})
        for name in order:
            ET.SubElement(node, "firing", {"actor": name})
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
    capacity = {}
    for cp in (props.findall("channelProperties") if props is not None else []):
        size = cp.find("bufferSize")
        if size is not None:
            capacity[_attr(cp, "channel")] = _integer(_attr(size, "sz"), "bufferSize")

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

    meta = {a.get("name"): a for a in settings.findall("actor")} if settings is not None else {}
    dropped = {m.get("concurrencyChannel") for m in meta.values()} - {None}
    actors = []
    for name in actor_names:
        m = meta.get(name)
        conc: int | None = None
        processor = None
        if m is not None:
            c = m.get("concurrency", "unbounded")
            conc = None if c == "unbounded" else _integer(c, f"concurrency of actor {name!r}")
            processor = m.get("processor")
        seconds = [float(t * Decimal(repr(float(time_unit)))) for t in cyclic(times[name],
                                                                             phases[name])]
        actors.append(Actor(name, seconds, processor, conc))
    transfer = {}
    orders: dict[str, list[str]] = {}
    if settings is not None:
        for c in settings.findall("channel"):
            transfer[c.get("name")] = float(_number(c.get("transferTime", "0"),
                                                    f"transfer time of {c.get('name')!r}"))
        for o in settings.findall("staticOrder"):
            orders[_attr(o, "processor")] = [_attr(f, "actor") for f in o.findall("firing")]
    channels = [Channel(name, src, dst, cyclic(prod, phases[src]), cyclic(cons, phases[dst]),
                        tokens, capacity.get(name), transfer.get(name, 0.0))
                for name, src, dst, prod, cons, tokens in raw_channels if name not in dropped]
    g = CsdfGraph(app.get("name") or graph.get("name") or "sdf3", actors, channels, orders)
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
