"""Latency of one iteration (one frame) of a timed CSDF graph under self-timed execution.

Built on the max-plus constraint graph of `hsdf.py`: the start time of node v in iteration k is
s(v, k) = max over edges u -> v (weight w, tokens d) of s(u, k - d) + w, or 0 (or k * period for
the nodes of source actors when a `period` paces the input). Iterating this recurrence is an
exact self-timed (as-soon-as-possible) execution of the graph with all its mapping constraints.

- `isolated`: iteration 0 alone: the longest path through one iteration's precedence graph;
- `steady`: the largest latency over a window of iterations after the execution settled into
  its periodic regime, where the latency of iteration k is the end of its last firing minus the
  start of its first one (this is what the runtime measures: first phase start to last output).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graphs import CsdfGraph
from .hsdf import expand, zero_token_order


@dataclass
class LatencyResult:
    isolated: float
    steady: float
    iterations: int  # iterations simulated

    def to_dict(self):
        return dict(self.__dict__)


def latency(g: CsdfGraph, period: float | None = None, iterations: int | None = None
            ) -> LatencyResult:
    h = expand(g)
    n = h.n
    if n == 0:
        return LatencyResult(0.0, 0.0, 0)
    order = zero_token_order(h)
    rank = np.empty(n, dtype=np.int64)
    rank[np.asarray(order)] = np.arange(n)
    w = h.weight
    times = np.asarray(h.time, dtype=float)
    zero = h.tokens == 0
    # zero-token edges, relaxed in topological order of their destination
    z_idx = np.flatnonzero(zero)
    z_idx = z_idx[np.argsort(rank[h.dst[z_idx]], kind="stable")]
    z_src, z_dst, z_w = h.src[z_idx].tolist(), h.dst[z_idx].tolist(), w[z_idx].tolist()
    # edges reaching back d >= 1 iterations, vectorised
    p_idx = np.flatnonzero(~zero)
    p_src, p_dst, p_tok, p_w = h.src[p_idx], h.dst[p_idx], h.tokens[p_idx], w[p_idx]
    max_d = int(p_tok.max()) if len(p_tok) else 0
    sources = _source_nodes(g, h)
    k_total = iterations or max(40, 4 * max_d + 8)
    hist: list[np.ndarray] = []
    lat = []
    for k in range(k_total):
        s = np.zeros(n)
        if period is not None:
            s[sources] = k * period
        if len(p_idx):
            ok = p_tok <= k
            if ok.any():
                prev = np.array([hist[k - d][u] for u, d in zip(p_src[ok].tolist(), p_tok[ok].tolist())])
                np.maximum.at(s, p_dst[ok], prev + p_w[ok])
        for u, v, ww in zip(z_src, z_dst, z_w):
            t = s[u] + ww
            if t > s[v]:
                s[v] = t
        hist.append(s)
        lat.append(float((s + times).max() - s.min()))
    window = lat[k_total // 2:]
    return LatencyResult(lat[0], max(window), k_total)


def _source_nodes(g: CsdfGraph, h) -> np.ndarray:
    fed = {c.dst for c in g.channels}
    src_actors = {a.name for a in g.actors if a.name not in fed} or {a.name for a in g.actors}
    return np.array([i for i, a in enumerate(h.actor) if a in src_actors], dtype=np.int64)
