"""Hypothesis strategies for random consistent timed CSDF graphs with mapping constraints."""
from __future__ import annotations

import math
import random

from hypothesis import strategies as st

from hetflow.dataflow.analysis import repetition_vector
from hetflow.dataflow.graphs import Actor, Channel, CsdfGraph


def _split(rng: random.Random, total: int, parts: int) -> list[int]:
    """`total` tokens spread over `parts` phases (some may get none)."""
    cuts = sorted(rng.randint(0, total) for _ in range(parts - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [total])]


@st.composite
def csdf_graphs(draw, max_actors: int = 5, max_phases: int = 3, max_cycles: int = 2,
                mapped: bool = True, live: bool = True, float_times: bool = False,
                cycle_replicas: bool = False) -> CsdfGraph:
    """A consistent CSDF graph: forward channels between actors in a random order (a DAG), back
    channels and self-loops carrying one iteration of tokens or more, random times, transfer
    times, concurrency, capacities and (if `mapped`) shared processors with static orders.

    With `live`, capacities and static orders are taken from one admissible sequential schedule,
    so the graph is live; otherwise they are random and the graph may deadlock.

    With `cycle_replicas`, about half the actors become replicated stages taking whole phase
    cycles in turn (`replicate="cycle"`, concurrency 2-3), multi-phase most of the time.
    """
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(2, max_actors))
    return random_csdf_graph(rng, n, max_phases, max_cycles, mapped, live, float_times,
                             cycle_replicas)


def random_csdf_graph(rng: random.Random, n: int, max_phases: int = 3, max_cycles: int = 2,
                      mapped: bool = True, live: bool = True, float_times: bool = False,
                      cycle_replicas: bool = False) -> CsdfGraph:
    """`csdf_graphs`' graph of `n` actors, every other choice drawn from `rng` (a seeded
    `random.Random` gives the same graph on every run)."""
    phases = [rng.randint(1, max_phases) for _ in range(n)]
    cycles = [rng.randint(1, max_cycles) for _ in range(n)]
    unit = 0.001 if float_times else 1.0

    def time() -> float:
        return rng.choice([0, 1, 1, 2, 3, 5]) * unit

    actors = [Actor(f"a{i}", [time() for _ in range(phases[i])],
                    concurrency=rng.choice([1, 1, 1, 2, 3, None])) for i in range(n)]
    if cycle_replicas:
        for a in actors:
            if rng.random() < 0.5:
                a.concurrency = rng.choice([2, 3])
                a.attrs["replicate"] = "cycle"
                while len(a.exec_times) < 2 and rng.random() < 0.8:
                    a.exec_times.append(time())
        phases = [a.phases for a in actors]

    def channel(name: str, s: int, d: int, tokens: int) -> Channel:
        m = rng.randint(1, 3)
        g = math.gcd(cycles[s], cycles[d])
        produced, consumed = m * cycles[d] // g, m * cycles[s] // g
        prod = _split(rng, produced, phases[s])
        cons = _split(rng, consumed, phases[d])
        return Channel(name, f"a{s}", f"a{d}", prod, cons, tokens,
                       transfer_time=rng.choice([0, 0, 0, 1, 2]) * unit)

    channels = []
    for d in range(1, n):  # every actor fed by an earlier one keeps the graph connected
        channels.append(channel(f"c{len(channels)}", rng.randrange(d), d, 0))
    for _ in range(rng.randint(0, n)):
        s, d = sorted(rng.sample(range(n), 2))
        channels.append(channel(f"c{len(channels)}", s, d, 0))
    for _ in range(rng.randint(0, 2)):  # back channels and self-loops
        d = rng.randrange(n)
        s = rng.randrange(d, n)
        c = channel(f"c{len(channels)}", s, d, 0)
        one_iteration = sum(c.consumption) * cycles[d]
        c.initial_tokens = one_iteration + rng.randint(0, 2)
        if not live and rng.random() < 0.3:
            c.initial_tokens = rng.randint(0, one_iteration)
        channels.append(c)

    g = CsdfGraph("random", actors, channels)
    sequence = _admissible_sequence(g, rng)
    _bound_channels(g, sequence, rng, live)
    complete = len(sequence) == sum(repetition_vector(g).values())
    if mapped and complete:  # static orders must list every firing of an iteration
        _map_on_processors(g, sequence, rng, live)
    return g


def _admissible_sequence(g: CsdfGraph, rng: random.Random) -> list[str]:
    """Firings of one iteration in a random order that respects data (unbounded channels)."""
    q = repetition_vector(g)
    tokens = {c.name: c.initial_tokens for c in g.channels}
    count = {a.name: 0 for a in g.actors}
    phases = {a.name: a.phases for a in g.actors}
    sequence = []
    while True:
        ready = [a for a in count if count[a] < q[a] and all(
            tokens[c.name] >= c.consumption[count[a] % phases[a]]
            for c in g.channels if c.dst == a)]
        if not ready:
            return sequence
        a = rng.choice(ready)
        p = count[a] % phases[a]
        for c in g.channels:
            if c.dst == a:
                tokens[c.name] -= c.consumption[p]
        for c in g.channels:
            if c.src == a:
                tokens[c.name] += c.production[p]
        count[a] += 1
        sequence.append(a)


def _bound_channels(g: CsdfGraph, sequence: list[str], rng: random.Random, live: bool) -> None:
    """Give some channels a capacity: at least the peak fill of `sequence` if `live`."""
    phases = {a.name: a.phases for a in g.actors}
    for c in g.channels:
        if rng.random() > 0.4:
            continue
        fill = peak = c.initial_tokens
        count = {a.name: 0 for a in g.actors}
        for a in sequence:
            p = count[a] % phases[a]
            if a == c.dst:
                fill -= c.consumption[p]
            if a == c.src:
                fill += c.production[p]
                peak = max(peak, fill)
            count[a] += 1
        low = peak if live else max(c.initial_tokens, peak - 2)
        c.capacity = low + rng.randint(0, 2)


def _map_on_processors(g: CsdfGraph, sequence: list[str], rng: random.Random, live: bool) -> None:
    """Put some actors on shared processors, ordered as in `sequence` (or shuffled if not live)."""
    for a in g.actors:
        a.processor = rng.choice([None, None, "p0", "p1"])
    for proc in ("p0", "p1"):
        order = [a for a in sequence if g.actor(a).processor == proc]
        if not live and rng.random() < 0.3:
            rng.shuffle(order)
        if order:
            g.static_order[proc] = order
