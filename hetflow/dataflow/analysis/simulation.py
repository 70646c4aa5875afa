"""Throughput by self-timed state-space exploration (Ghamarian et al., ACSD 2006).

Every firing starts as soon as graphs.py allows: tokens on its inputs (visible `transfer_time`
after the producing firing ends, and in firing order, see hsdf.py), space on bounded outputs
(claimed at its start, freed when the consumer starts), its turn in its processor's static order
with the previous firing there ended, and the end of the firing `concurrency` places earlier.
Simultaneous enabled firings never compete (each channel has one producer and one consumer), so
the execution is unique.

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
from .hsdf import common_scale
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
        inner = [c for c in g.channels if c.src in members and c.dst in members]
        self.tokens = [c.initial_tokens for c in inner]
        self.capacity = [c.capacity for c in inner]
        self.delay = [int(Fraction(c.transfer_time) * scale) for c in inner]
        self.transit: list[deque] = [deque() for _ in inner]  # (visible at, amount)
        self.ins: list[list[tuple[int, list[int]]]] = [[] for _ in component]
        self.outs: list[list[tuple[int, list[int]]]] = [[] for _ in component]
        self.self_cons: list[dict[int, list[int]]] = [{} for _ in component]
        self.prod: list[list[int]] = []  # per channel, tokens produced by each producer firing
        for k, c in enumerate(inner):
            s, d = index[c.src], index[c.dst]
            cons = [c.consumption[i % len(c.consumption)] for i in range(q[c.dst])]
            self.prod.append([c.production[i % len(c.production)] for i in range(q[c.src])])
            self.ins[d].append((k, cons))
            self.outs[s].append((k, self.prod[k]))
            if s == d:  # a bounded self-loop frees its space before claiming it
                self.self_cons[s][k] = cons
        self.procs = [firings for p, firings in schedules.items() if firings[0][0] in members]
        self.proc_of = [None] * len(component)
        for p, firings in enumerate(self.procs):
            for name, _ in firings:
                self.proc_of[index[name]] = p
        self.turn = [0] * len(self.procs)
        self.busy_until = [0] * len(self.procs)
        self.started = [0] * len(component)
        self.ends: list[deque] = [deque() for _ in component]  # unreleased firings' end times
        self.firings = 0

    def run(self, budget: int) -> Fraction:
        """Period per iteration (scaled units) of the periodic regime; 0 if unbounded."""
        seen: dict[tuple, tuple[int, int]] = {}
        ref_q = self.q[0]
        sampled_iteration = -1
        now = 0
        while True:
            while self._round(now):  # rounds at one instant until nothing more happens
                if self.firings > budget:
                    raise StateSpaceLimitError(
                        f"throughput simulation of graph {self.name!r} met no recurrent state "
                        f"within {budget} firings; raise max_firings or use throughput_mcr")
                iteration = self.started[0] // ref_q
                if iteration > sampled_iteration:
                    sampled_iteration = iteration
                    key = self._state(now)
                    if key in seen:
                        then, started_then = seen[key]
                        return Fraction(now - then, (self.started[0] - started_then) // ref_q)
                    seen[key] = (now, self.started[0])
            now = self._next_event(now)

    def _round(self, now: int) -> bool:
        progress = False
        for k, queue in enumerate(self.transit):
            while queue and queue[0][0] <= now:
                self.tokens[k] += queue.popleft()[1]
                progress = True
        for a, ends in enumerate(self.ends):
            while ends and ends[0] <= now:  # release in firing order
                ends.popleft()
                firing = (self.started[a] - len(ends) - 1) % self.q[a]
                for k, prod in self.outs[a]:
                    if self.delay[k]:
                        self.transit[k].append((now + self.delay[k], prod[firing]))
                    else:
                        self.tokens[k] += prod[firing]
                progress = True
        for a in range(len(self.actors)):
            # at most one iteration's firings per round: zero-time firings could go on for ever
            for _ in range(self.q[a]):
                if not self._enabled(a, now):
                    break
                self._start(a, now)
                progress = True
        return progress

    def _enabled(self, a: int, now: int) -> bool:
        i = self.started[a] % self.q[a]
        p = self.proc_of[a]
        if p is not None:
            if self.procs[p][self.turn[p]][0] != self.actors[a] or self.busy_until[p] > now:
                return False
        k = self.conc[a]
        if k is not None and len(self.ends[a]) >= k:
            # firing started-k must have ended; ends[-k] is its end (or it was released)
            if self.ends[a][-k] > now:
                return False
        for ch, cons in self.ins[a]:
            if self.tokens[ch] < cons[i]:
                return False
        for ch, prod in self.outs[a]:
            cap = self.capacity[ch]
            if cap is not None:
                held = self.tokens[ch] + sum(amount for _, amount in self.transit[ch]) \
                    + self._claimed(a, ch)
                freed = self.self_cons[a][ch][i] if ch in self.self_cons[a] else 0
                if held - freed + prod[i] > cap:
                    return False
        return True

    def _claimed(self, a: int, ch: int) -> int:
        """Space claimed on `ch` by firings of `a` that have started but not yet produced."""
        prod, q = self.prod[ch], self.q[a]
        return sum(prod[(self.started[a] - 1 - j) % q] for j in range(len(self.ends[a])))

    def _start(self, a: int, now: int) -> None:
        i = self.started[a] % self.q[a]
        for ch, cons in self.ins[a]:
            self.tokens[ch] -= cons[i]
        end = now + self.times[a][i]
        self.ends[a].append(end)
        p = self.proc_of[a]
        if p is not None:
            self.turn[p] = (self.turn[p] + 1) % len(self.procs[p])
            self.busy_until[p] = end
        self.started[a] += 1
        self.firings += 1

    def _next_event(self, now: int) -> int:
        times = [e for ends in self.ends for e in ends if e > now]
        times += [t for queue in self.transit for t, _ in queue if t > now]
        times += [t for t in self.busy_until if t > now]
        if not times:
            raise DeadlockError(f"graph {self.name!r}: actors {', '.join(self.actors)} stopped "
                                f"in the timed execution")
        return min(times)

    def _state(self, now: int) -> tuple:
        return (tuple(s % q for s, q in zip(self.started, self.q)),
                tuple(tuple(max(0, e - now) for e in ends) for ends in self.ends),
                tuple(self.tokens),
                tuple(tuple((t - now, n) for t, n in queue) for queue in self.transit),
                tuple(self.turn),
                tuple(max(0, b - now) for b in self.busy_until))
