"""Expansion of a timed CSDF graph with mapping constraints into a max-plus constraint graph.

One node per firing of one iteration: node (a, i) is firing i (0 <= i < q[a]) of actor a, whose
start in iteration k we write s(a, i, k). Every constraint of graphs.py is an edge u -> v with a
weight w (seconds) and a token count d (an iteration distance) meaning s(v, k) >= s(u, k - d) + w:

- data channel c (a -> b): firing j of b consumes the tokens up to the m-th produced, so it
  waits for the end of the producing firing (weight t_u + transfer_time). Tokens of one actor are
  delivered in firing order (a firing that ends early under concurrency > 1 waits for its
  predecessors), so b also waits for those of the k - 1 firings before it (concurrency k) that
  may end later: as firings start in order, only one longer than every later one can, and
  looking back further than one phase cycle finds none;
- bounded channel c: producer firing i waits for the start (weight 0) of the consumer firing that
  frees the space it claims; this is the reverse channel with capacity - initial_tokens tokens
  (a ring of slots: the slot of token m is the one token m - capacity held);
- concurrency k: firing n waits for the end of firing n - k (k replicas take firings in turn);
  for k != 1 firings still start in order (edge n - 1 -> n, weight 0); an actor with
  attrs["replicate"] == "cycle" has k replicas taking whole phase cycles in turn instead, whose
  firings may start out of index order (`Expander._cycle_replica_edges`);
- static order: each firing of a processor's order waits for the end of the previous one.

Throughput is then 1 / (maximum cycle ratio), sum of weights over sum of tokens on a cycle; a
cycle without tokens is a deadlock. Times are floats here; `exact_weights` gives integers for
exact analyses.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from hetflow.errors import DeadlockError, InputError

from hetflow.dataflow.graphs import Channel, CsdfGraph
from hetflow.dataflow.analysis.orders import FiringOrders, check_firing_orders, processor_schedules
from hetflow.dataflow.analysis.repetition import repetition_vector

MAX_NODES = 100_000


@dataclass
class Hsdf:
    """The constraint graph; edge weight = (time of its source node if `with_time`) + `delay`."""

    actor: list[str]  # per node
    firing: list[int]  # per node: firing index within the iteration
    time: list[float]  # per node: execution time (s)
    src: np.ndarray
    dst: np.ndarray
    tokens: np.ndarray
    with_time: np.ndarray
    delay: np.ndarray
    # per node: iteration k of the recursion over this graph is iteration k + shift of the CSDF
    # graph's own (<= 0 where `_retime` moved firing orders' edges; None: all 0)
    shift: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.actor)

    @property
    def weight(self) -> np.ndarray:
        return np.where(self.with_time, np.asarray(self.time, dtype=float)[self.src], 0.0) \
            + self.delay

    def exact_weights(self, scale: int) -> list[int]:
        """Edge weights as integers in units of 1/scale s; `scale` must make them integral."""
        times = [Fraction(t) for t in self.time]
        out = []
        for u, wt, dl in zip(self.src.tolist(), self.with_time.tolist(), self.delay.tolist()):
            w = (times[u] if wt else 0) + Fraction(dl)
            out.append(_integral(w * scale))
        return out

    def time_values(self) -> list[float]:
        return list(self.time) + self.delay.tolist()


def common_scale(values) -> int:
    """Smallest integer that turns every value (float or Fraction) into an integer."""
    return math.lcm(1, *(Fraction(v).denominator for v in values))


def _integral(x: Fraction) -> int:
    if x.denominator != 1:
        raise ValueError(f"time {x} is not integral at this scale")
    return x.numerator


class _Edges:
    def __init__(self):
        self.src, self.dst, self.tokens, self.with_time, self.delay = [], [], [], [], []

    def add(self, u: int, v: int, tokens: int, with_time: bool, delay: float = 0.0):
        self.src.append(u)
        self.dst.append(v)
        self.tokens.append(tokens)
        self.with_time.append(with_time)
        self.delay.append(delay)


class Expander:
    """Builds the edges of each constraint; kept so buffer sizing can redo one channel cheaply."""

    def __init__(self, g: CsdfGraph, q: dict[str, int] | None = None, max_nodes: int = MAX_NODES,
                 orders: FiringOrders | None = None):
        self.g = g
        self.q = q if q is not None else repetition_vector(g)
        self.orders = orders or {}
        check_firing_orders(g, self.q, self.orders)
        total = sum(self.q.values())
        if total > max_nodes:
            raise InputError(f"graph {g.name!r}: one iteration has {total} firings, more than "
                             f"the {max_nodes} the HSDF expansion allows")
        self.schedules = processor_schedules(g, self.q, self.orders)
        self.first: dict[str, int] = {}
        actor, firing, time = [], [], []
        for a in g.actors:
            self.first[a.name] = len(actor)
            for i in range(self.q[a.name]):
                actor.append(a.name)
                firing.append(i)
                time.append(float(a.exec_times[i % a.phases]))
        self.actor, self.firing, self.time = actor, firing, time
        self.by_name = {a.name: a for a in g.actors}

    def node(self, name: str, i: int) -> int:
        return self.first[name] + i

    def per_iteration(self, c: Channel, producer: bool) -> list[int]:
        """Cumulative tokens moved by the first i firings of one iteration, i = 0..q."""
        name, seq = (c.src, c.production) if producer else (c.dst, c.consumption)
        cum = [0]
        for i in range(self.q[name]):
            cum.append(cum[-1] + seq[i % len(seq)])
        return cum

    def base_edges(self) -> _Edges:
        """Edges of data channels, concurrency and static orders (everything but capacities)."""
        e = _Edges()
        for c in self.g.channels:
            self._data_edges(e, c)
        in_order = {f.actor for order in self.orders.values() for f in order}
        for a in self.g.actors:
            if a.name in in_order:
                continue  # its firing order serialises it (and may interleave iterations)
            if a.attrs.get("replicate") == "cycle" and a.concurrency not in (None, 1):
                self._cycle_replica_edges(e, a.name, a.concurrency, a.phases)
            else:
                self._concurrency_edges(e, a.name, a.concurrency)
        for proc, firings in self.schedules.items():
            for j, (name, i) in enumerate(firings):
                nxt_name, nxt_i = firings[(j + 1) % len(firings)]
                e.add(self.node(name, i), self.node(nxt_name, nxt_i),
                      1 if j + 1 == len(firings) else 0, True)
        for order in self.orders.values():
            # round r runs f_j of iteration r + offset_j: from f_j to f_{j+1} the iteration
            # advances by offset_{j+1} - offset_j (plus one round at the wrap-around); a
            # negative count is removed by `_retime`
            for j, f in enumerate(order):
                nxt = order[(j + 1) % len(order)]
                e.add(self.node(f.actor, f.firing), self.node(nxt.actor, nxt.firing),
                      nxt.frame_offset - f.frame_offset + (j + 1 == len(order)), True)
        return e

    def _data_edges(self, e: _Edges, c: Channel) -> None:
        prod, cons = self.per_iteration(c, True), self.per_iteration(c, False)
        q_src = self.q[c.src]
        if self._cycle_replicas(c.src):
            for j in range(self.q[c.dst]):
                if cons[j + 1] == cons[j]:
                    continue
                last = _last_needed(prod, cons[j + 1] - c.initial_tokens)
                for f in self._unfinished_before(c.src, last):
                    e.add(self.node(c.src, f % q_src), self.node(c.dst, j), -(f // q_src), True,
                          c.transfer_time)
            return
        conc = self.by_name[c.src].concurrency
        window = q_src if conc is None else min(conc, q_src)
        # beyond one phase cycle back, every time repeats one already seen: no longer firing
        window = min(window, self.by_name[c.src].phases)
        for j in range(self.q[c.dst]):
            if cons[j + 1] == cons[j]:
                continue  # this firing consumes nothing here
            last = _last_needed(prod, cons[j + 1] - c.initial_tokens)
            longest = -1.0
            for back in range(window):
                f = last - back
                t = self.time[self.node(c.src, f % q_src)]
                if t <= longest:
                    continue  # started earlier and no longer than a later firing: ends earlier
                longest = t
                e.add(self.node(c.src, f % q_src), self.node(c.dst, j), -(f // q_src), True,
                      c.transfer_time)

    def capacity_edges(self, c: Channel, capacity: int | None) -> _Edges:
        e = _Edges()
        if capacity is None:
            return e
        prod, cons = self.per_iteration(c, True), self.per_iteration(c, False)
        q_dst = self.q[c.dst]
        for i in range(self.q[c.src]):
            if prod[i + 1] == prod[i]:
                continue  # produces nothing here, claims no space
            # a ring of `capacity` slots: token m goes where token m - capacity was, freed when
            # the firing that takes it starts (whether or not earlier ones have: cycle replicas
            # may start them out of order)
            f = _last_needed(cons, c.initial_tokens + prod[i + 1] - capacity)
            u, v, d = self.node(c.dst, f % q_dst), self.node(c.src, i), -(f // q_dst)
            if u == v and d == 0:
                continue  # a self-loop frees its own space before claiming it
            e.add(u, v, d, False)
        return e

    def _cycle_replicas(self, name: str) -> bool:
        a = self.by_name[name]
        return a.attrs.get("replicate") == "cycle" and a.concurrency not in (None, 1)

    def _unfinished_before(self, name: str, last: int) -> list[int]:
        """Firings of cycle-replicated `name` that bound when all firings up to `last` (an index
        relative to the iteration) have ended: `last` itself and the last phase of each of the
        k - 1 cycles before its own. Earlier phases of a cycle end before its last one starts,
        and cycle c - k ends before cycle c starts (same replica), hence so do all earlier
        cycles (cycles start in order)."""
        a = self.by_name[name]
        phases, k = a.phases, a.concurrency
        first = last - last % phases  # phase 0 of last's cycle
        return [last] + [first - 1 - back * phases for back in range(k - 1)]

    def _concurrency_edges(self, e: _Edges, name: str, k: int | None) -> None:
        q = self.q[name]
        for i in range(q):
            if k is not None:
                f = i - k
                e.add(self.node(name, f % q), self.node(name, i), -(f // q), True)
            if k != 1:
                f = i - 1
                e.add(self.node(name, f % q), self.node(name, i), -(f // q), False)

    def _cycle_replica_edges(self, e: _Edges, name: str, k: int, phases: int) -> None:
        """k replicas taking whole phase *cycles* in turn (hetflow's replicated stages take
        frames in turn; a frame's phases run one after another on one replica): a phase waits
        for the end of the previous phase of its cycle; the first phase of cycle c waits for the
        end of cycle c - k (same replica) and for the start of cycle c - 1 (start order: the
        start of its *first* phase; a later phase of cycle c - 1 may start after cycle c does).
        Since firings of such an actor may then end out of index order, and its tokens are
        delivered in firing order, its output channels' data edges look back over k cycles
        (`_unfinished_before`)."""
        q = self.q[name]
        for i in range(q):
            if i % phases:
                f = i - 1
                e.add(self.node(name, f % q), self.node(name, i), -(f // q), True)
            else:
                f = i - (k - 1) * phases - 1
                e.add(self.node(name, f % q), self.node(name, i), -(f // q), True)
                f = i - phases
                e.add(self.node(name, f % q), self.node(name, i), -(f // q), False)

    def build(self, capacities: dict[str, int | None] | None = None) -> Hsdf:
        """The whole graph; `capacities` overrides channel capacities by name."""
        parts = [self.base_edges()]
        for c in self.g.channels:
            cap = capacities.get(c.name, c.capacity) if capacities else c.capacity
            parts.append(self.capacity_edges(c, cap))
        return self.assemble(parts)

    def assemble(self, parts: list[_Edges]) -> Hsdf:
        src, dst, tok, wt, dl = [], [], [], [], []
        for p in parts:
            src += p.src
            dst += p.dst
            tok += p.tokens
            wt += p.with_time
            dl += p.delay
        return _dedupe(_retime(Hsdf(self.actor, self.firing, self.time,
                                    np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64),
                                    np.asarray(tok, dtype=np.int64), np.asarray(wt, dtype=bool),
                                    np.asarray(dl, dtype=float))))


def expand(g: CsdfGraph, q: dict[str, int] | None = None, max_nodes: int = MAX_NODES,
           orders: FiringOrders | None = None) -> Hsdf:
    """The constraint graph of `g` (see the module docstring), with the processors' firing
    orders if given; InputError if it is too large."""
    return Expander(g, q, max_nodes, orders).build()


def _retime(h: Hsdf) -> Hsdf:
    """The same constraints with no negative token count (edges of firing orders that reach into
    later iterations have some). Node v is renumbered by a potential p(v) (its iteration k becomes
    k - p(v)), p the shortest token distances, so every edge's count d + p(u) - p(v) is >= 0 and
    every cycle keeps its count (hence the period). DeadlockError if a cycle has fewer than zero
    tokens: a firing would wait for a later iteration of itself."""
    if len(h.tokens) == 0 or h.tokens.min() >= 0:
        return h
    p = np.zeros(h.n, dtype=np.int64)
    for _ in range(h.n + 1):
        new = p.copy()
        np.minimum.at(new, h.dst, p[h.src] + h.tokens)
        changed = new != p
        if not changed.any():
            break
        p = new
    else:
        stuck = sorted({h.actor[v] for v in np.flatnonzero(changed).tolist()})
        raise DeadlockError(f"the firing orders make actors {', '.join(map(repr, stuck))} wait "
                            f"for later frames of themselves")
    return Hsdf(h.actor, h.firing, h.time, h.src, h.dst, h.tokens + p[h.src] - p[h.dst],
                h.with_time, h.delay, p)


def _last_needed(cum: list[int], need: int) -> int:
    """Index f (relative to the iteration, may be negative) of the last firing needed so that the
    firings up to f have moved at least `need` tokens, given the per-iteration cumulative `cum`."""
    per_iter, q = cum[-1], len(cum) - 1
    k = (need - 1) // per_iter  # whole iterations before the one holding the needed token
    i = bisect_left(cum, need - k * per_iter)  # 1 <= i <= q
    return k * q + i - 1


def _dedupe(h: Hsdf) -> Hsdf:
    """Keep, for each (u, v, tokens), only the heaviest edge."""
    if len(h.src) == 0:
        return h
    w = h.weight
    order = np.lexsort((-w, h.tokens, h.dst, h.src))
    key = np.stack([h.src[order], h.dst[order], h.tokens[order]])
    keep = np.ones(len(order), dtype=bool)
    keep[1:] = np.any(key[:, 1:] != key[:, :-1], axis=0)
    idx = order[keep]
    return Hsdf(h.actor, h.firing, h.time, h.src[idx], h.dst[idx], h.tokens[idx],
                h.with_time[idx], h.delay[idx], h.shift)


def zero_token_order(h: Hsdf) -> list[int]:
    """Nodes in an order respecting every edge without tokens (a topological order of one
    iteration); raises DeadlockError naming the actors on a cycle without tokens."""
    zero = h.tokens == 0
    src, dst = h.src[zero].tolist(), h.dst[zero].tolist()
    indeg = [0] * h.n
    out: list[list[int]] = [[] for _ in range(h.n)]
    for u, v in zip(src, dst):
        out[u].append(v)
        indeg[v] += 1
    order = [v for v in range(h.n) if indeg[v] == 0]
    for u in order:  # grows while iterating
        for v in out[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                order.append(v)
    if len(order) < h.n:
        stuck = sorted({h.actor[v] for v in range(h.n) if indeg[v] > 0})
        raise DeadlockError(f"cycle without tokens through actors {', '.join(map(repr, stuck))}: "
                            f"they wait on each other within one iteration")
    return order
