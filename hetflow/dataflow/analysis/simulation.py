"""Throughput by self-timed state-space exploration (Ghamarian et al., ACSD 2006).

Every firing starts as soon as graphs.py allows: tokens on its inputs (visible `transfer_time`
after the producing firing ends, and in firing order, see hsdf.py), space on bounded outputs
(claimed at its start, freed when the consumer starts), its turn in its processor's static order
with the previous firing there ended, and the end of the firing `concurrency` places earlier.
Simultaneous enabled firings never compete (each channel has one producer and one consumer), so
the execution is unique.

An actor with `attrs["replicate"] == "cycle"` and concurrency k > 1 has k replicas taking whole
phase cycles in turn (hsdf.py, `_cycle_replica_edges`): a later phase of a cycle waits for the
end of the one before it, phase 0 of cycle c for the end of cycle c - k and the start of cycle
c - 1. Its firings may then start out of index order, so tokens are counted by index: a firing
consumes the tokens its index is due, whoever starts first, and a channel's count is relative to
the consumer's first firing not yet started. A bounded channel is a ring of slots: a firing that
produces token m needs the consumer firing that takes token m - capacity to have started.

Times are scaled to exact integers, so states compare exactly. The state (tokens, claimed space,
tokens in transit, phase counters, remaining times of ongoing firings, static-order positions) is
recorded each time a reference actor begins a new iteration; when a state recurs, the execution
is periodic from then on and the period per iteration is elapsed time / iterations in between.

Tokens only stay bounded inside a strongly connected part of the actor graph (data channels,
capacities, static orders and concurrency all count as links), so each such component is
simulated on its own, with channels entering it from outside always full; the graph's period is
the largest period of its components (a component cannot outrun the ones feeding it). A component
without any cycle, e.g. one actor with unbounded concurrency, does not limit throughput.
"""
from __future__ import annotations

import math
from collections import deque
from fractions import Fraction

import networkx as nx

from hetflow.errors import DeadlockError, HetflowError

from ..graphs import CsdfGraph
from .hsdf import _last_needed, common_scale
from .liveness import check_liveness
from .orders import processor_schedules
from .repetition import repetition_vector
from .throughput import ThroughputResult

MAX_FIRINGS = 2_000_000


class StateSpaceLimitError(HetflowError):
    """The state-space exploration met no recurrent state within its firing budget."""


def throughput_simulation(g: CsdfGraph, max_firings: int = MAX_FIRINGS) -> ThroughputResult:
    """Self-timed throughput found by simulation up to a recurrent state.

    `critical` is left empty (a simulation does not tell which cycle limits). Raises DeadlockError
    if the graph cannot run, StateSpaceLimitError if no state recurs within `max_firings`.
    """
    q = repetition_vector(g)
    schedules = processor_schedules(g, q)
    check_liveness(g)
    scale = common_scale([t for a in g.actors for t in a.exec_times]
                         + [c.transfer_time for c in g.channels])
    period = Fraction(0)
    budget = max_firings
    for component in _cyclic_components(g, schedules):
        sim = _Simulation(g, q, schedules, component, scale)
        period = max(period, sim.run(budget))
        budget -= sim.firings
    if period == 0:
        return ThroughputResult(math.inf, 0.0, [], "simulation")
    seconds = float(period / scale)
    return ThroughputResult(1.0 / seconds, seconds, [], "simulation")


def _cyclic_components(g: CsdfGraph, schedules) -> list[list[str]]:
    """Strongly connected components of the actor graph that contain a cycle, in actor order."""
    links = nx.DiGraph()
    links.add_nodes_from(a.name for a in g.actors)
    for c in g.channels:
        links.add_edge(c.src, c.dst)
        if c.capacity is not None:
            links.add_edge(c.dst, c.src)
    for a in g.actors:
        if a.concurrency is not None:
            links.add_edge(a.name, a.name)
    for firings in schedules.values():
        for (u, _), (v, _) in zip(firings, firings[1:] + firings[:1]):
            links.add_edge(u, v)
    rank = {a.name: i for i, a in enumerate(g.actors)}
    out = []
    for comp in nx.strongly_connected_components(links):
        names = sorted(comp, key=rank.__getitem__)
        if len(names) > 1 or links.has_edge(names[0], names[0]):
            out.append(names)
    return sorted(out, key=lambda names: rank[names[0]])


def _cumulative(seq: list[int]) -> list[int]:
    out = [0]
    for x in seq:
        out.append(out[-1] + x)
    return out


def _up_to(cum: list[int], n: int) -> int:
    """Tokens moved by firings 0..n (over iterations), given one iteration's cumulative `cum`."""
    q = len(cum) - 1
    return (n + 1) // q * cum[-1] + cum[(n + 1) % q]


class _Simulation:
    """Self-timed execution of one strongly connected component, in integer time units."""

    def __init__(self, g: CsdfGraph, q, schedules, component: list[str], scale: int):
        self.name = g.name
        members = set(component)
        self.actors = component
        index = {a: i for i, a in enumerate(component)}
        by_name = {a.name: a for a in g.actors}
        self.q = [q[a] for a in component]
        self.times = [[int(Fraction(by_name[a].exec_times[i % by_name[a].phases]) * scale)
                       for i in range(q[a])] for a in component]
        self.conc = [by_name[a].concurrency for a in component]
        self.phases = [by_name[a].phases for a in component]
        self.cycle = [by_name[a].attrs.get("replicate") == "cycle"
                      and by_name[a].concurrency not in (None, 1) for a in component]
        inner = [c for c in g.channels if c.src in members and c.dst in members]
        self.tokens = [c.initial_tokens for c in inner]
        self.delay = [int(Fraction(c.transfer_time) * scale) for c in inner]
        self.transit: list[deque] = [deque() for _ in inner]  # (visible at, amount)
        self.ins: list[list[tuple[int, list[int]]]] = [[] for _ in component]
        self.outs: list[list[tuple[int, list[int]]]] = [[] for _ in component]
        self.prod: list[list[int]] = []  # per channel, tokens produced by each producer firing
        # per bounded channel: (consumer, cumulative production and consumption over one
        # iteration, initial tokens - capacity); None if unbounded
        self.ring: list[tuple | None] = []
        self.producer = [index[c.src] for c in inner]
        for k, c in enumerate(inner):
            s, d = index[c.src], index[c.dst]
            cons = [c.consumption[i % len(c.consumption)] for i in range(q[c.dst])]
            self.prod.append([c.production[i % len(c.production)] for i in range(q[c.src])])
            self.ins[d].append((k, cons))
            self.outs[s].append((k, self.prod[k]))
            self.ring.append(None if c.capacity is None else (
                d, _cumulative(self.prod[k]), _cumulative(cons), c.initial_tokens - c.capacity))
        self.procs = [firings for p, firings in schedules.items() if firings[0][0] in members]
        self.proc_of = [None] * len(component)
        for p, firings in enumerate(self.procs):
            for name, _ in firings:
                self.proc_of[index[name]] = p
        self.turn = [0] * len(self.procs)
        self.busy_until = [0] * len(self.procs)
        # per actor: `released` firings have ended and produced (in index order); ends[j] is the
        # end of firing released + j, None while it has not started (only cycle replicas leave
        # gaps); `low` is the first firing not started, up to which inputs are consumed
        self.released = [0] * len(component)
        self.ends: list[deque] = [deque() for _ in component]
        self.low = [0] * len(component)
        self.firings = 0

    def run(self, budget: int) -> Fraction:
        """Period per iteration (scaled units) of the periodic regime; 0 if unbounded."""
        seen: dict[tuple, tuple[int, int]] = {}
        instant: set[tuple] = set()  # what decides further starts now, at this instant
        ref_q = self.q[0]
        sampled_iteration = -1
        now = 0
        while True:
            while self._round(now):  # rounds at one instant until nothing more happens
                if self.firings > budget:
                    raise StateSpaceLimitError(
                        f"throughput simulation of graph {self.name!r} met no recurrent state "
                        f"within {budget} firings; raise max_firings or use throughput_mcr")
                iteration = self.low[0] // ref_q
                if iteration > sampled_iteration:
                    sampled_iteration = iteration
                    key = self._state(now)
                    if key in seen:
                        then, started_then = seen[key]
                        return Fraction(now - then, (self.low[0] - started_then) // ref_q)
                    seen[key] = (now, self.low[0])
                    # iterations without time passing (zero-time firings feeding an actor of
                    # unbounded concurrency): its unfinished firings pile up, so no full state
                    # recurs, but once what decides the starts at this instant does, they go on
                    # for ever at this instant: period 0
                    key = self._instant_state(now)
                    if key in instant:
                        return Fraction(0)
                    instant.add(key)
            now = self._next_event(now)
            instant.clear()

    def _round(self, now: int) -> bool:
        progress = False
        for k, queue in enumerate(self.transit):
            while queue and queue[0][0] <= now:
                self.tokens[k] += queue.popleft()[1]
                progress = True
        for a, ends in enumerate(self.ends):
            while ends and ends[0] is not None and ends[0] <= now:  # release in firing order
                ends.popleft()
                firing = self.released[a] % self.q[a]
                self.released[a] += 1
                for k, prod in self.outs[a]:
                    if self.delay[k]:
                        self.transit[k].append((now + self.delay[k], prod[firing]))
                    else:
                        self.tokens[k] += prod[firing]
                progress = True
        for a in range(len(self.actors)):
            # at most one iteration's firings per round: zero-time firings could go on for ever
            for _ in range(self.q[a]):
                n = next((n for n in self._candidates(a, now) if self._enabled(a, n, now)), None)
                if n is None:
                    break
                self._start(a, n, now)
                progress = True
        return progress

    def _ended(self, a: int, n: int, now: int) -> bool:
        if n < self.released[a]:
            return True
        end = self.ends[a][n - self.released[a]]
        return end is not None and end <= now

    def _candidates(self, a: int, now: int) -> list[int]:
        """Firings of `a` that concurrency (or the cycle-replica rule) lets start now."""
        ends, r = self.ends[a], self.released[a]
        n = r + len(ends)  # the next firing never started (for cycle replicas: a new cycle)
        if not self.cycle[a]:
            k = self.conc[a]
            # firing n - k must have ended (k replicas take firings in turn)
            return [n] if k is None or self._ended(a, n - k, now) else []
        phases, k = self.phases[a], self.conc[a]
        # a later phase of a cycle in flight, once the phase before it has ended
        out = [r + j for j, end in enumerate(ends)
               if end is None and (r + j) % phases and self._ended(a, r + j - 1, now)]
        if self._ended(a, n - (k - 1) * phases - 1, now):  # cycle c - k (same replica) ended
            out.append(n)
        return out

    def _due(self, a: int, seq: list[int], n: int) -> int:
        """Tokens of `seq` due to (or from) firings low .. n of `a`."""
        return sum(seq[m % self.q[a]] for m in range(self.low[a], n + 1))

    def _enabled(self, a: int, n: int, now: int) -> bool:
        i = n % self.q[a]
        p = self.proc_of[a]
        if p is not None:
            if self.procs[p][self.turn[p]] != (self.actors[a], i) or self.busy_until[p] > now:
                return False
        for ch, cons in self.ins[a]:
            # the tokens due to firing n are those after every earlier firing's, if it takes any
            if cons[i] and self.tokens[ch] < self._due(a, cons, n):
                return False
        for ch, prod in self.outs[a]:
            if self.ring[ch] is None or not prod[i]:  # producing nothing claims nothing
                continue
            d, produced, consumed, offset = self.ring[ch]
            need = offset + _up_to(produced, n)  # tokens taken before n's last slot is free
            if need > 0:
                f = _last_needed(consumed, need)
                if not (f == n and d == a) and not self._has_started(d, f):
                    return False  # (a self-loop frees its own space before claiming it)
        return True

    def _has_started(self, a: int, n: int) -> bool:
        if n < self.low[a]:
            return True
        j = n - self.released[a]
        return j < len(self.ends[a]) and self.ends[a][j] is not None

    def _low_after(self, a: int, n: int) -> int:
        """The first firing not started once firing n (= low) starts."""
        ends, r = self.ends[a], self.released[a]
        m = n + 1
        while m - r < len(ends) and ends[m - r] is not None:
            m += 1
        return m

    def _start(self, a: int, n: int, now: int) -> None:
        i = n % self.q[a]
        end = now + self.times[a][i]
        ends, r = self.ends[a], self.released[a]
        if n - r < len(ends):
            ends[n - r] = end
        else:  # a new firing; for cycle replicas a new cycle, its later phases not started
            ends.append(end)
            if self.cycle[a]:
                ends.extend([None] * (self.phases[a] - 1))
        if n == self.low[a]:  # consume inputs in index order, up to the next gap
            low = self._low_after(a, n)
            for ch, cons in self.ins[a]:
                self.tokens[ch] -= self._due(a, cons, low - 1)
            self.low[a] = low
        p = self.proc_of[a]
        if p is not None:
            self.turn[p] = (self.turn[p] + 1) % len(self.procs[p])
            self.busy_until[p] = end
        self.firings += 1

    def _next_event(self, now: int) -> int:
        times = [e for ends in self.ends for e in ends if e is not None and e > now]
        times += [t for queue in self.transit for t, _ in queue if t > now]
        times += [t for t in self.busy_until if t > now]
        if not times:
            raise DeadlockError(f"graph {self.name!r}: actors {', '.join(self.actors)} stopped "
                                f"in the timed execution")
        return min(times)

    def _instant_state(self, now: int) -> tuple:
        """The part of the state that decides which firings can still start at `now`: firings
        ending later only matter through the order of release, and, for an actor of unbounded
        concurrency, only the first of them (it holds back the release of the rest)."""
        per_actor = []
        for a, ends in enumerate(self.ends):
            marks = [None if e is None else e > now for e in ends]
            if self.conc[a] is None and not self.cycle[a] and True in marks:
                marks = marks[:marks.index(True) + 1]
            per_actor.append((self.low[a] % self.q[a], self.released[a] % self.q[a],
                              tuple(marks)))
        # a bounded channel's slots: its fill up to the first firings not started (the
        # producer's unfinished firings count, however many pile up)
        fill = tuple(None if ring is None else _up_to(ring[1], self.low[self.producer[ch]] - 1)
                     - _up_to(ring[2], self.low[ring[0]] - 1) for ch, ring in enumerate(self.ring))
        return (tuple(per_actor), tuple(self.tokens), fill, tuple(self.turn),
                tuple(b > now for b in self.busy_until))

    def _state(self, now: int) -> tuple:
        return (tuple(r % q for r, q in zip(self.released, self.q)),
                tuple(tuple(None if e is None else max(0, e - now) for e in ends)
                      for ends in self.ends),
                tuple(self.tokens),
                tuple(tuple((t - now, n) for t, n in queue) for queue in self.transit),
                tuple(self.turn),
                tuple(max(0, b - now) for b in self.busy_until))
