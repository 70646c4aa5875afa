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

Frame-interleaved firing orders (orders.py `Firing`) replace a processor's static order: in
round r it runs entry j's firing of iteration r + offset_j, from the round where the largest
offset reaches iteration 0, skipping entries of iterations below 0 (as the runtime does). An
actor on such a processor may then start its firings out of index order. As in hsdf.py, a firing
that reads from such an actor waits for the end (and transfer) of the firing that produces the
last token it needs, not for the earlier ones, which may run later.

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

from hetflow.dataflow.graphs import CsdfGraph
from hetflow.dataflow.analysis.hsdf import _last_needed, common_scale
from hetflow.dataflow.analysis.liveness import check_liveness
from hetflow.dataflow.analysis.orders import FiringOrders, check_firing_orders, processor_schedules
from hetflow.dataflow.analysis.repetition import repetition_vector
from hetflow.dataflow.analysis.throughput import ThroughputResult

MAX_FIRINGS = 2_000_000


class StateSpaceLimitError(HetflowError):
    """The state-space exploration met no recurrent state within its firing budget."""


def throughput_simulation(g: CsdfGraph, max_firings: int = MAX_FIRINGS,
                          orders: FiringOrders | None = None) -> ThroughputResult:
    """Self-timed throughput found by simulation up to a recurrent state, with the processors'
    frame-interleaved firing `orders` if given.

    `critical` is left empty (a simulation does not tell which cycle limits). Raises DeadlockError
    if the graph cannot run, StateSpaceLimitError if no state recurs within `max_firings`.
    """
    q = repetition_vector(g)
    orders = orders or {}
    check_firing_orders(g, q, orders)
    # each processor's cyclic order as (actor, firing, frame offset); static orders at offset 0
    schedules = {p: [(a, i, 0) for a, i in firings]
                 for p, firings in processor_schedules(g, q, orders).items()}
    schedules.update({p: [(f.actor, f.firing, f.frame_offset) for f in order]
                      for p, order in orders.items() if order})
    check_liveness(g, orders)
    scale = common_scale([t for a in g.actors for t in a.exec_times]
                         + [c.transfer_time for c in g.channels])
    period = Fraction(0)
    budget = max_firings
    for component in _cyclic_components(g, schedules):
        sim = _Simulation(g, q, schedules, set(orders), component, scale)
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
        for (u, *_), (v, *_) in zip(firings, firings[1:] + firings[:1]):
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

    def __init__(self, g: CsdfGraph, q, schedules, interleaved: set[str], component: list[str],
                 scale: int):
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
        # per channel: cumulative production and consumption over one iteration
        self.cum: list[tuple[list[int], list[int]]] = []
        self.producer = [index[c.src] for c in inner]
        for k, c in enumerate(inner):
            s, d = index[c.src], index[c.dst]
            cons = [c.consumption[i % len(c.consumption)] for i in range(q[c.dst])]
            self.prod.append([c.production[i % len(c.production)] for i in range(q[c.src])])
            self.ins[d].append((k, cons))
            self.outs[s].append((k, self.prod[k]))
            self.cum.append((_cumulative(self.prod[k]), _cumulative(cons)))
            self.ring.append(None if c.capacity is None else (
                d, *self.cum[k], c.initial_tokens - c.capacity))
        chosen = [(p, firings) for p, firings in schedules.items() if firings[0][0] in members]
        self.procs = [firings for _, firings in chosen]  # (actor, firing, frame offset)
        self.interleaved = [p in interleaved for p, _ in chosen]
        self.proc_of = [None] * len(component)
        for p, firings in enumerate(self.procs):
            for name, *_ in firings:
                self.proc_of[index[name]] = p
        self.turn = [0] * len(self.procs)
        self.busy_until = [0] * len(self.procs)
        # a processor's round; a firing order starts where its largest offset reaches iteration
        # 0, and its state counts rounds only up to where no entry is skipped any more
        offsets = [[o for *_, o in firings] for firings in self.procs]
        self.first_round = [-max(o) for o in offsets]
        self.round = list(self.first_round)
        self.span = [max(o) - min(o) + 1 for o in offsets]
        # actors whose processor interleaves iterations: firings may start out of index order;
        # `started` holds their firings' ends (until they are below `low`, have ended and their
        # tokens have arrived everywhere), `delivered` those whose tokens have been sent
        self.ordered = [p is not None and self.interleaved[p] for p in self.proc_of]
        self.started: list[dict[int, int]] = [{} for _ in component]
        self.delivered: list[set[int]] = [set() for _ in component]
        self.initial = [c.initial_tokens for c in inner]
        self.max_delay = [max((self.delay[k] for k, _ in self.outs[a]), default=0)
                          for a in range(len(component))]
        for p in range(len(self.procs)):
            self._skip(p)
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
            if self.ordered[a] and self._deliver(a, now):
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

    def _deliver(self, a: int, now: int) -> bool:
        """Tokens of an interleaved actor's firings that ended, each when it ends (the token
        counts then only describe the state: `_enabled` reads `_visible`)."""
        moved = False
        started, delivered = self.started[a], self.delivered[a]
        for n, end in started.items():
            if end <= now and n not in delivered:
                delivered.add(n)
                for k, prod in self.outs[a]:
                    i = n % self.q[a]
                    if self.delay[k]:
                        self.transit[k].append((end + self.delay[k], prod[i]))
                    else:
                        self.tokens[k] += prod[i]
                moved = True
        for n in [n for n, end in started.items()
                  if n < self.low[a] and end + self.max_delay[a] <= now]:
            del started[n]  # ended, its tokens arrived: below `low` it reads as visible
            delivered.discard(n)
        return moved

    def _visible(self, a: int, n: int, k: int, now: int) -> bool:
        """Whether firing n of interleaved `a` has ended and its tokens crossed channel k."""
        return self._ended(a, n, now - self.delay[k])

    def _skip(self, p: int) -> None:
        """Past a firing order's entries of iterations before the first."""
        while self.round[p] + self.procs[p][self.turn[p]][2] < 0:
            self._advance(p)

    def _advance(self, p: int) -> None:
        self.turn[p] += 1
        if self.turn[p] == len(self.procs[p]):
            self.turn[p] = 0
            self.round[p] += 1

    def _ended(self, a: int, n: int, now: int) -> bool:
        if self.ordered[a]:
            end = self.started[a].get(n)
            return n < self.low[a] if end is None else end <= now
        if n < self.released[a]:
            return True
        end = self.ends[a][n - self.released[a]]
        return end is not None and end <= now

    def _candidates(self, a: int, now: int) -> list[int]:
        """Firings of `a` that concurrency (or the cycle-replica rule, or an interleaving
        processor's turn) lets start now."""
        if self.ordered[a]:
            p = self.proc_of[a]
            name, firing, offset = self.procs[p][self.turn[p]]
            return [(self.round[p] + offset) * self.q[a] + firing] \
                if name == self.actors[a] else []
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
            name, firing, _ = self.procs[p][self.turn[p]]
            if name != self.actors[a] or firing != i or self.busy_until[p] > now:
                return False
        for ch, cons in self.ins[a]:
            if not cons[i]:
                continue
            src = self.producer[ch]
            if self.ordered[src]:  # the producer of the last token it needs, as hsdf.py
                need = _up_to(self.cum[ch][1], n) - self.initial[ch]
                if need > 0 and not self._visible(src, _last_needed(self.cum[ch][0], need),
                                                  ch, now):
                    return False
            # the tokens due to firing n are those after every earlier firing's
            elif self.tokens[ch] < self._due(a, cons, n):
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
        if self.ordered[a]:
            return n in self.started[a]
        j = n - self.released[a]
        return j < len(self.ends[a]) and self.ends[a][j] is not None

    def _low_after(self, a: int, n: int) -> int:
        """The first firing not started once firing n (= low) starts."""
        m = n + 1
        while self._has_started(a, m):
            m += 1
        return m

    def _start(self, a: int, n: int, now: int) -> None:
        i = n % self.q[a]
        end = now + self.times[a][i]
        if self.ordered[a]:
            self.started[a][n] = end
        else:
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
            self._advance(p)
            self._skip(p)
            self.busy_until[p] = end
        self.firings += 1

    def _next_event(self, now: int) -> int:
        times = [e for ends in self.ends for e in ends if e is not None and e > now]
        times += [t for queue in self.transit for t, _ in queue if t > now]
        times += [t for t in self.busy_until if t > now]
        times += [e for started in self.started for e in started.values() if e > now]
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
                tuple(b > now for b in self.busy_until), self._interleaving(now, True))

    def _state(self, now: int) -> tuple:
        return (tuple(r % q for r, q in zip(self.released, self.q)),
                tuple(tuple(None if e is None else max(0, e - now) for e in ends)
                      for ends in self.ends),
                tuple(self.tokens),
                tuple(tuple((t - now, n) for t, n in queue) for queue in self.transit),
                tuple(self.turn),
                tuple(max(0, b - now) for b in self.busy_until), self._interleaving(now, False))

    def _interleaving(self, now: int, marks: bool) -> tuple:
        """The state of interleaved actors and processors, relative to each actor's first
        firing not started: started firings (their remaining times, or only whether they are
        still running), which have sent their tokens, the processor's round; and how many of its
        first rounds a processor has run, up to where none skips an entry."""
        out = []
        for a, started in enumerate(self.started):
            if not self.ordered[a]:
                continue
            low = self.low[a]
            out.append((low % self.q[a],
                        tuple(sorted((n - low, end > now if marks else max(0, end - now))
                                     for n, end in started.items())),
                        self.round[self.proc_of[a]] * self.q[a] - low))
        delivered = tuple(tuple(sorted(n - self.low[a] for n in d))
                          for a, d in enumerate(self.delivered) if self.ordered[a])
        rounds = tuple(min(r - r0, span) for r, r0, span, il in
                       zip(self.round, self.first_round, self.span, self.interleaved) if il)
        return tuple(out), delivered, rounds
