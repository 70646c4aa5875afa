"""Maximum cycle ratio by Howard's policy iteration (Cochet-Terrasson et al. 1998; Dasdan 2004).

Given edges u -> v with weight w and tokens d >= 0, find max over cycles C of w(C) / d(C).
Preconditions (the HSDF expansion guarantees both): every node has an outgoing edge and no cycle
has zero tokens. A policy picks one outgoing edge per node; its graph has one cycle per
component. Value determination gives each node the ratio `eta` of the cycle it reaches and a
potential `x` with x(u) = w - eta * d + x(v) along the policy; improvement switches a node to an
edge reaching a larger ratio, or, at equal ratio, a larger potential. The loop stops when no
node improves; then eta(u) is the largest ratio of a cycle reachable from u.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class CycleRatio:
    ratio: float  # the maximum cycle ratio
    cycle: list[int]  # nodes of a critical cycle, in order
    cycle_edges: list[int]  # the policy's edges along it (indices into the caller's arrays)
    eta: np.ndarray  # per node: the largest ratio of a cycle reachable from it
    potential: np.ndarray  # per node: the potentials of the final policy
    iterations: int


def max_cycle_ratio(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray,
                    tokens: np.ndarray, max_iterations: int = 10_000) -> CycleRatio:
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    weight, tokens = weight[order].astype(float), tokens[order].astype(float)
    starts = np.searchsorted(src, np.arange(n))
    if len(src) == 0 or np.any(np.diff(np.append(starts, len(src))) == 0):
        raise ValueError("every node needs an outgoing edge")
    scale = max(1.0, float(np.max(np.abs(weight)))) if len(weight) else 1.0
    eps_eta = 1e-12 * scale
    eps_x = 1e-9 * scale

    policy = _group_argmax(weight, src, starts, n)
    x = np.zeros(n)
    for iteration in range(1, max_iterations + 1):
        eta, x, cycles = _evaluate(n, dst[policy].tolist(), weight[policy].tolist(),
                                   tokens[policy].tolist(), x.tolist())
        # First improve the ratio reached, then the potential at an equal ratio.
        eta_via = eta[dst]
        best = np.maximum.reduceat(eta_via, starts)
        better = best > eta + eps_eta
        if better.any():
            choice = _group_argmax(eta_via, src, starts, n)
            policy = np.where(better, choice, policy)
            continue
        value = weight - eta[src] * tokens + x[dst]
        value = np.where(np.abs(eta_via - eta[src]) <= eps_eta, value, -np.inf)
        best = np.maximum.reduceat(value, starts)
        better = best > x + eps_x
        if not better.any():
            ratio, cycle = max(cycles, key=lambda rc: rc[0])
            edges = [int(order[policy[u]]) for u in cycle]
            return CycleRatio(ratio, cycle, edges, eta, x, iteration)
        choice = _group_argmax(value, src, starts, n)
        policy = np.where(better, choice, policy)
    raise RuntimeError(f"Howard's policy iteration did not converge in {max_iterations} rounds")


def _group_argmax(values: np.ndarray, src: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:
    """Index (into the edge arrays, sorted by src) of the first largest value of each node."""
    best = np.maximum.reduceat(values, starts)
    hit = np.flatnonzero(values >= best[src])
    _, first = np.unique(src[hit], return_index=True)
    return hit[first]


def _evaluate(n: int, succ: list[int], w: list[float], d: list[float], previous: list[float]):
    """Ratios and potentials of the policy graph (each node has exactly one successor). A
    cycle's potentials are anchored at the previous potential of the node where it is found,
    not at 0: re-anchoring a kept cycle at 0 shifts its whole basin, and comparisons with
    other basins of the same ratio could then undo each other's improvements for ever
    (Cochet-Terrasson et al. keep the old value likewise)."""
    eta = [0.0] * n
    x = [0.0] * n
    state = [0] * n  # 0 new, 1 on the current path, 2 done
    cycles = []
    for start in range(n):
        if state[start]:
            continue
        path = []
        v = start
        while state[v] == 0:
            state[v] = 1
            path.append(v)
            v = succ[v]
        if state[v] == 1:  # closed a new cycle at v
            at = path.index(v)
            cycle = path[at:]
            del path[at:]
            total_d = sum(d[u] for u in cycle)
            if total_d <= 0:
                raise ValueError("cycle without tokens")
            ratio = sum(w[u] for u in cycle) / total_d
            cycles.append((ratio, cycle))
            eta[v], x[v], state[v] = ratio, previous[v], 2
            for u in reversed(cycle[1:]):
                eta[u] = ratio
                x[u] = w[u] - ratio * d[u] + x[succ[u]]
                state[u] = 2
        for u in reversed(path):
            s = succ[u]
            eta[u] = eta[s]
            x[u] = w[u] - eta[s] * d[u] + x[s]
            state[u] = 2
    return np.asarray(eta), np.asarray(x), cycles
