"""Exhaustive search: every assignment of layers to the actors of every configuration, for small
instances (<= 12 layers, <= 4 elements). The optimum the other strategies are tested against.

Actors are elements or replica groups of identical elements. For each configuration, every way
to split each class of identical elements into groups gives one *actor set* (a class of 3 cores:
{3}, {2,1}, {1,1,1}; identical elements are interchangeable, so one representative split per
integer partition suffices), and every layer -> actor assignment over it is a candidate. Two
reductions keep it exact but fast:

- symmetry: interchangeable actors (same class, same group size) are numbered in order of first
  use, and a group of two or more elements must be used (an unused group is the same mapping as
  one from a finer split);
- bounding: an actor of k elements whose layers take T seconds (plus at least one call overhead
  and the element's per-call overhead) cannot complete more than k/T frames per second, so
  1 / max(T_a / k_a) bounds the analysed throughput of a mapping from above (not with measured
  sub-network times, which may beat the sum of their layers: then every mapping is evaluated,
  up to MAX_UNPRUNED). Candidates are evaluated in order of decreasing bound, and
  the search stops once the bound drops to the best analysed throughput found. If the analysis
  ever returns more than the bound, the bound's premise is broken and the search says so.

`contiguous=True` restricts the space to Pipe-All pipelines (contiguous runs of the layer order,
one distinct actor per stage, at most `max_stages` stages): the space of the `pipeline` strategy.
"""
from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from hetflow.errors import InputError
from hetflow.platform.configs import integer_partitions

from hetflow.mapping.interleaving import RunScores
from hetflow.plan.mapping import Mapping, group_name
from hetflow.mapping.problem import Problem, evaluate
from hetflow.mapping.strategies.base import SearchResult, configurations

MAX_LAYERS = 12
MAX_ELEMENTS = 4
CHUNK = 1 << 18  # candidate rows per numpy batch
MAX_UNPRUNED = 20_000


@dataclass
class ActorSet:
    actors: list[str]
    columns: np.ndarray  # layer_times column of each actor (one member)
    sizes: np.ndarray  # replicas per actor
    symmetric: list[list[int]]  # runs of interchangeable actor indices, in order


def actor_sets(problem: Problem, config: list[str]) -> Iterator[ActorSet]:
    """One actor set per combination of integer partitions of the config's identical classes."""
    classes: dict[tuple, list[str]] = {}
    for e in config:
        classes.setdefault(problem.element(e).equivalence_key, []).append(e)
    members = list(classes.values())
    for parts in itertools.product(*(list(integer_partitions(len(m))) for m in members)):
        actors, cols, sizes, symmetric = [], [], [], []
        for group_sizes, elems in zip(parts, members):
            start = 0
            for size, run in itertools.groupby(group_sizes):
                run_idx = []
                for _ in run:
                    run_idx.append(len(actors))
                    actors.append(group_name(elems[start:start + size]))
                    cols.append(problem.element_index[elems[start]])
                    sizes.append(size)
                    start += size
                symmetric.append(run_idx)
        yield ActorSet(actors, np.array(cols), np.array(sizes), symmetric)


def _full_rows(n_layers: int, n_actors: int) -> Iterator[np.ndarray]:
    total = n_actors ** n_layers
    powers = n_actors ** np.arange(n_layers - 1, -1, -1, dtype=np.int64)
    for lo in range(0, total, CHUNK):
        idx = np.arange(lo, min(total, lo + CHUNK), dtype=np.int64)
        yield ((idx[:, None] // powers[None, :]) % n_actors).astype(np.int8)


def _pipeline_rows(n_layers: int, n_actors: int, max_stages: int) -> Iterator[np.ndarray]:
    rows = []
    for k in range(1, min(max_stages, n_layers, n_actors) + 1):
        for cuts in itertools.combinations(range(1, n_layers), k - 1):
            bounds = (0, *cuts, n_layers)
            reps = np.diff(bounds)
            for seq in itertools.permutations(range(n_actors), k):
                rows.append(np.repeat(seq, reps))
                if len(rows) == CHUNK:
                    yield np.array(rows, dtype=np.int8)
                    rows = []
    if rows:
        yield np.array(rows, dtype=np.int8)


def _keep_and_bound(rows: np.ndarray, aset: ActorSet, times: np.ndarray, overhead: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Drop non-canonical rows; return the kept rows and their throughput upper bounds."""
    n = rows.shape[1]
    used = np.zeros((rows.shape[0], len(aset.actors)), bool)
    first = np.full((rows.shape[0], len(aset.actors)), n)
    period = np.zeros(rows.shape[0])
    for a in range(len(aset.actors)):
        hit = rows == a
        used[:, a] = hit.any(axis=1)
        first[:, a] = np.where(used[:, a], hit.argmax(axis=1), n)
        load = hit @ times[:, aset.columns[a]]
        period = np.maximum(period, np.where(used[:, a], (load + overhead[a]) / aset.sizes[a], 0))
    keep = np.ones(rows.shape[0], bool)
    for run in aset.symmetric:
        for a, b in zip(run, run[1:]):
            keep &= (first[:, b] == n) | (first[:, a] < first[:, b])
    for a in np.flatnonzero(aset.sizes > 1):
        keep &= used[:, a]
    with np.errstate(divide="ignore"):
        bound = 1.0 / period[keep]
    return rows[keep], bound


def search(problem: Problem, seed: int = 0, contiguous: bool = False, max_stages: int = 3,
           first_batch: int = 64, interleave: bool = True, **_) -> SearchResult:
    """Maximise analysed throughput over every mapping (or every contiguous pipeline), each as
    its plan runs it (with `interleave`, a mapping with round trips with the interleaved phase
    orders `choose_interleave` finds; the bound holds for every order)."""
    t0 = time.perf_counter()
    layers = [l.name for l in problem.graph.layers]
    n, m = len(layers), len(problem.elements)
    if n > MAX_LAYERS or m > MAX_ELEMENTS:
        raise InputError(f"strategy 'exhaustive' handles at most {MAX_LAYERS} layers and "
                         f"{MAX_ELEMENTS} elements; this problem has {n} layers and {m} elements "
                         "(use 'pipeline', 'ga' or 'ilp')")
    times = np.asarray(problem.frame_layer_times, float)
    sets = [a for config in configurations(problem) for a in actor_sets(problem, config)]
    # measured sub-network times may beat the sum of their layers: no valid bound then
    prune = not problem.subnet_times

    def batches():
        for sid, aset in enumerate(sets):
            # one phase at least: its call overhead and the element's per-call overhead
            overhead = np.array([problem.call_overhead + problem.element_overhead.get(
                problem.elements[c].name, 0.0) for c in aset.columns])
            gen = (_pipeline_rows(n, len(aset.actors), max_stages) if contiguous
                   else _full_rows(n, len(aset.actors)))
            for rows in gen:
                kept, bound = _keep_and_bound(rows, aset, times, overhead)
                yield sid, kept, bound if prune else np.full(len(kept), np.inf)

    runs = RunScores(problem, interleave=interleave)
    best: list = [None, None, 0.0]  # mapping as run, metrics, throughput

    def consider(sid: int, row: np.ndarray, bound: float) -> None:
        aset = sets[sid]
        mapping = Mapping({l: aset.actors[a] for l, a in zip(layers, row)}, "maximal")
        if mapping.key() in runs.runs:
            return
        mapping, metrics = runs(mapping)
        if metrics.throughput > bound * (1 + 1e-6):
            raise RuntimeError(f"analysed throughput {metrics.throughput:.6g} of {mapping.actors}"
                               f" exceeds its bound {bound:.6g}: the analysis lets an actor run "
                               "faster than its busy time allows")
        if metrics.throughput > best[2]:
            best[:] = [mapping, metrics, metrics.throughput]

    # pass 1: the most promising candidates overall give a good incumbent
    top: list[tuple[float, int, int, bytes]] = []
    space = 0
    for sid, kept, bound in batches():
        space += len(kept)
        if not prune and space > MAX_UNPRUNED:
            raise InputError(f"strategy 'exhaustive': with measured sub-network times no bound "
                             f"prunes the space, and it holds over {MAX_UNPRUNED} mappings")
        for i in np.argsort(-bound)[:first_batch]:
            item = (float(bound[i]), sid, len(top), kept[i].tobytes())
            if len(top) < first_batch:
                heapq.heappush(top, item)
            elif item[0] > top[0][0]:
                heapq.heapreplace(top, item)
    for bnd, sid, _, raw in sorted(top, reverse=True):
        if bnd <= best[2]:
            break
        consider(sid, np.frombuffer(raw, np.int8), bnd)
    # pass 2: everything whose bound still beats the incumbent, best bound first
    if len(top) == first_batch and top[0][0] > best[2]:  # rows outside the batch may win
        bounds, sids, rows = [], [], []
        for sid, kept, bound in batches():
            sel = bound > best[2]
            bounds.append(bound[sel])
            sids.append(np.full(int(sel.sum()), sid))
            rows.append(kept[sel])
        bounds_a, sids_a, rows_a = np.concatenate(bounds), np.concatenate(sids), np.vstack(rows)
        for i in np.argsort(-bounds_a, kind="stable"):
            if bounds_a[i] <= best[2]:
                break
            consider(int(sids_a[i]), rows_a[i], float(bounds_a[i]))
    if best[0] is None:
        raise InputError("exhaustive search found no mapping with finite time "
                         "(every layer is inf on every element?)")
    mapping, _, _ = best
    metrics = evaluate(problem, mapping)
    return SearchResult(mapping, metrics, [], len(runs.runs), time.perf_counter() - t0, space,
                        {"contiguous": contiguous, "actor_sets": len(sets),
                         "pruned_by_bound": space - len(runs.runs),
                         "space_upper": sum(len(s.actors) ** n for s in sets)},
                        scored_as_run=interleave)


__all__ = ["search", "actor_sets", "MAX_LAYERS", "MAX_ELEMENTS"]
