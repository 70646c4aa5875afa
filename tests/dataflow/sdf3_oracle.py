"""An independent reader of SDF3 XML: plain (C)SDF semantics, nothing of hetflow.

Parses only the standard part (actors, ports, channels with initial tokens, execution times),
expands one iteration into firings with the textbook max-plus rules (a firing waits for the end
of the firing that produced the last token it consumes; firings of one actor start in order;
actors overlap with themselves without limit), and returns the period as the maximum cycle ratio
of that graph, found by a parametric search with networkx's Bellman-Ford cycle test.
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from fractions import Fraction

import networkx as nx


def read_plain(text: str) -> tuple[dict[str, list[float]], list[tuple]]:
    """Actors (name -> phase times) and channels (src, dst, production, consumption, tokens)."""
    root = ET.fromstring(text)
    app = root.find("applicationGraph")
    graph = next(e for e in app if e.tag in ("sdf", "csdf"))
    props = next(e for e in app if e.tag.endswith("Properties"))
    rates = {}
    for actor in graph.findall("actor"):
        for port in actor.findall("port"):
            rates[(actor.get("name"), port.get("name"))] = [int(x) for x in
                                                            port.get("rate").split(",")]
    times = {a.get("name"): [0.0] for a in graph.findall("actor")}
    for ap in props.findall("actorProperties"):
        t = ap.find("processor/executionTime").get("time")
        times[ap.get("actor")] = [float(x) for x in t.split(",")]
    channels = [(c.get("srcActor"), c.get("dstActor"), rates[(c.get("srcActor"), c.get("srcPort"))],
                 rates[(c.get("dstActor"), c.get("dstPort"))], int(c.get("initialTokens", "0")))
                for c in graph.findall("channel")]
    phases = {a: math.lcm(len(t), *[len(p) for s, _, p, _, _ in channels if s == a],
                          *[len(c) for _, d, _, c, _ in channels if d == a])
              for a, t in times.items()}
    times = {a: [t[i % len(t)] for i in range(phases[a])] for a, t in times.items()}
    channels = [(s, d, [p[i % len(p)] for i in range(phases[s])],
                 [c[i % len(c)] for i in range(phases[d])], n) for s, d, p, c, n in channels]
    return times, channels


def repetitions(times, channels) -> dict[str, int]:
    """Firings per iteration (phase cycles balanced over every channel), one component assumed
    connected or each scaled on its own."""
    cycles: dict[str, Fraction] = {}
    adj: dict[str, list] = {a: [] for a in times}
    for s, d, p, c, _ in channels:
        adj[s].append((d, Fraction(sum(p), sum(c))))
        adj[d].append((s, Fraction(sum(c), sum(p))))
    for a0 in times:
        if a0 in cycles:
            continue
        cycles[a0], stack, comp = Fraction(1), [a0], [a0]
        while stack:
            a = stack.pop()
            for b, ratio in adj[a]:
                if b not in cycles:
                    cycles[b] = cycles[a] * ratio
                    stack.append(b)
                    comp.append(b)
        scale = math.lcm(*(cycles[a].denominator for a in comp))
        ints = [int(cycles[a] * scale) for a in comp]
        g = math.gcd(*ints)
        for a, r in zip(comp, ints):
            cycles[a] = Fraction(r // g)
    return {a: int(cycles[a]) * len(times[a]) for a in times}


def firing_graph(times, channels) -> nx.MultiDiGraph:
    """Edges u -> v with weight w and tokens d: start(v, k) >= start(u, k - d) + w."""
    q = repetitions(times, channels)
    h = nx.MultiDiGraph()
    for a, n in q.items():
        for i in range(n):
            h.add_edge((a, (i - 1) % n), (a, i), w=0.0, d=int(i == 0))  # in-order starts
    for s, d, prod, cons, tokens in channels:
        produced = [0]
        for i in range(q[s]):
            produced.append(produced[-1] + prod[i % len(prod)])
        consumed = 0
        for j in range(q[d]):
            consumed += cons[j % len(cons)]
            if cons[j % len(cons)] == 0:
                continue
            need = consumed - tokens  # tokens of this iteration's production it needs
            iteration = -((-need) // produced[-1]) - 1  # ceil(need / per iteration) - 1
            rest = need - iteration * produced[-1]
            f = next(i for i in range(q[s]) if produced[i + 1] >= rest)
            h.add_edge((s, f), (d, j), w=times[s][f % len(times[s])], d=-iteration)
    return h


def max_cycle_ratio(h: nx.MultiDiGraph, rel: float = 1e-10) -> float:
    """Largest sum(w) / sum(d) over the cycles of h (to a relative `rel`); ValueError if a cycle
    has no tokens (a deadlock within one iteration)."""
    def positive_cycle(lam: float) -> bool:
        g = nx.DiGraph()
        for u, v, e in h.edges(data=True):
            cost = lam * e["d"] - e["w"]  # a cycle of negative cost has ratio above lam
            if not g.has_edge(u, v) or g[u][v]["cost"] > cost:
                g.add_edge(u, v, cost=cost)
        return nx.negative_edge_cycle(g, weight="cost")

    zero = nx.DiGraph([(u, v) for u, v, e in h.edges(data=True) if e["d"] == 0])
    if not nx.is_directed_acyclic_graph(zero):
        raise ValueError("a cycle without tokens: deadlock")
    lo, hi = 0.0, sum(e["w"] for _, _, e in h.edges(data=True)) + 1.0
    if not positive_cycle(0.0):
        return 0.0  # no cycle of positive weight
    while hi - lo > rel * max(hi, 1.0):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if positive_cycle(mid) else (lo, mid)
    return hi


def period(text: str) -> float:
    times, channels = read_plain(text)
    return max_cycle_ratio(firing_graph(times, channels))
