"""Multi-objective mapping search with pymoo: NSGA-II (`nsga2`) and SPEA2 (`spea2`, as Kang et
al. 2020 use it), over the chromosomes of `ga.Encoding` (layer -> element, replica-group labels).

Objectives, all from `evaluate()`: throughput (maximised), steady-state latency, energy per frame
(from each element's measured idle and busy power, else its `power_w`: mapping/energy.py; left
out when some element has neither) and peak memory (the largest per-element figure). `util_cap` bounds CPU utilisation as in Kang et al., either per CPU element
(`util_scope="element"`, default) or averaged over all CPU cores of the configuration
(`util_scope="average"`, Kang et al.'s definition). Kang et al. add a penalty to the fitness of
mappings over the cap; here it is a pymoo inequality constraint, which ranks any mapping under
the cap above any mapping over it and, among those over it, the smaller excess first: the limit
of a large penalty weight.

Each configuration is searched separately (the encoding depends on it) and the fronts are
merged; `front` is the non-dominated set over all runs, `best` its highest throughput (ties
within 0.5%: lower latency). If no mapping found meets the cap, InfeasibleError names the
element and the lowest utilisation seen.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
from pymoo.algorithms.moo.nsga2 import NSGA2
from pymoo.algorithms.moo.spea2 import SPEA2
from pymoo.core.problem import Problem as PymooProblem
from pymoo.optimize import minimize
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

from hetflow.errors import InfeasibleError, InputError

from hetflow.mapping.interleaving import RunScores
from hetflow.plan.mapping import Mapping
from hetflow.mapping.problem import Metrics, Problem
from hetflow.mapping.strategies.base import SearchResult, best_of, configurations
from hetflow.mapping.strategies.ga import CanonicalRepair, Encoding, RowDuplicates, SingleGeneMutation, SinglePoint, baseline_seeds, pipeline_seeds

OBJECTIVES = ("throughput", "latency", "energy", "memory")


def objective_values(m: Metrics, names: list[str]) -> list[float]:
    """Minimisation form of each objective (throughput negated)."""
    out = []
    for name in names:
        if name == "throughput":
            out.append(-m.throughput if np.isfinite(m.throughput) else 0.0)
        elif name == "latency":
            out.append(m.latency if np.isfinite(m.latency) else 1e30)
        elif name == "energy":
            out.append(m.energy_per_frame if m.energy_per_frame is not None else 1e30)
        else:
            out.append(float(max(m.peak_memory.values(), default=0)))
    return out


def cpu_utilisation(problem: Problem, m: Metrics, config: list[str], scope: str
                    ) -> tuple[float, str]:
    """(utilisation the cap applies to, the element or 'average' it belongs to)."""
    cpus = [e for e in config if problem.element(e).kind == "cpu"]
    if not cpus:
        return 0.0, "no cpu"
    if scope == "average":  # Kang et al.: over all CPU cores, idle ones included
        cores = sum(len(problem.element(e).cores) for e in cpus)
        busy = sum(m.utilisation.get(e, 0.0) * len(problem.element(e).cores) for e in cpus)
        return busy / cores, "the average cpu core"
    worst = max(cpus, key=lambda e: m.utilisation.get(e, 0.0))
    return m.utilisation.get(worst, 0.0), worst


class _MappingProblem(PymooProblem):
    def __init__(self, enc: Encoding, names: list[str], fn, constrained: bool):
        super().__init__(n_var=enc.n_var, n_obj=len(names), n_ieq_constr=int(constrained),
                         xl=np.zeros(enc.n_var), xu=enc.upper, vtype=int)
        self.fn = fn
        self.constrained = constrained

    def _evaluate(self, X, out, *args, **kwargs):
        F, G = self.fn(np.asarray(np.rint(X), dtype=np.int64))
        out["F"] = F
        if self.constrained:
            out["G"] = G


def _search(problem: Problem, algorithm: str, seed: int = 0, pop_size: int = 40,
            generations: int = 40, util_cap: float | None = None, util_scope: str = "element",
            objectives: list[str] | None = None, replicate: bool = True,
            seed_pipeline: bool = True, mutation: float = 0.5, crossover: float = 0.9,
            interleave: bool = True, **_) -> SearchResult:
    t0 = time.perf_counter()
    names = list(objectives or OBJECTIVES)
    unknown = [n for n in names if n not in OBJECTIVES]
    if unknown or not names:
        raise InputError(f"{algorithm}: unknown objective(s) {unknown} "
                         f"(use {', '.join(OBJECTIVES)})")
    if util_scope not in ("element", "average"):
        raise InputError(f"{algorithm}: util_scope must be 'element' or 'average', "
                         f"not {util_scope!r}")
    if util_cap is not None and not 0 < util_cap <= 1:
        raise InputError(f"{algorithm}: util_cap must be in (0, 1], got {util_cap}")
    notes: dict[str, Any] = {"algorithm": algorithm, "objectives": names, "util_cap": util_cap,
                             "util_scope": util_scope}
    unpowered = [e.name for e in problem.elements if problem.element_power(e.name) is None]
    if "energy" in names and unpowered:
        names.remove("energy")
        notes["skipped"] = f"energy: element {unpowered[0]} has no power figure"
    rng = np.random.default_rng(seed)
    # a chromosome's objectives are its design's as its plan runs it (interleaved where
    # faster); the front keeps the same design in frame order too (fewer frames in flight)
    runs = RunScores(problem, with_latency=True, interleave=interleave)

    def metrics_of(mapping: Mapping) -> Metrics:
        return runs(mapping)[1]

    shared = pipeline_seeds(problem) if seed_pipeline else {}
    found: list[tuple[Mapping, Metrics, list[float], float]] = []  # mapping, metrics, F, excess
    lightest: tuple[float, str] | None = None
    runs_per_config = []
    for config in configurations(problem):
        enc = Encoding(problem, config, replicate)

        def fn(X, enc=enc, config=config):
            nonlocal lightest
            F, G = [], []
            for x in X:
                mapping = Mapping(enc.decode(x))
                m = metrics_of(mapping)
                F.append(objective_values(m, names))
                util, where = cpu_utilisation(problem, m, config, util_scope)
                excess = util - util_cap if util_cap is not None else 0.0
                G.append([excess])
                if util_cap is not None and (lightest is None or util < lightest[0]):
                    lightest = (util, where)
            return np.array(F), np.array(G)

        seeds = baseline_seeds(problem, config) | shared
        rows = [x for m in seeds.values() if (x := enc.encode(m)) is not None][:pop_size]
        X0 = rng.integers(0, enc.upper + 1, size=(pop_size, enc.n_var))
        if rows:
            X0[:len(rows)] = rows
        ops = dict(pop_size=pop_size, sampling=X0, crossover=SinglePoint(crossover),
                   mutation=SingleGeneMutation(enc.upper, mutation),
                   repair=CanonicalRepair(enc), eliminate_duplicates=RowDuplicates())
        algo = NSGA2(**ops) if algorithm == "nsga2" else SPEA2(**ops)
        with np.errstate(invalid="ignore", divide="ignore"):  # SPEA2 normalises flat objectives
            res = minimize(_MappingProblem(enc, names, fn, util_cap is not None), algo,
                           ("n_gen", generations), seed=int(rng.integers(2**31)), verbose=False)
        runs_per_config.append({"config": config,
                                "evaluations": int(res.algorithm.evaluator.n_eval)})
        X = np.asarray(np.rint(res.pop.get("X")), dtype=np.int64)
        for x in X:
            mapping = Mapping(enc.decode(x))
            run, m = runs(mapping)
            variants = [(run, m)] + ([(mapping, runs.frame_order[mapping.key()])]
                                     if run.key() != mapping.key() else [])
            for design, dm in variants:
                util = cpu_utilisation(problem, dm, config, util_scope)[0]
                found.append((design, dm, objective_values(dm, names),
                              util - util_cap if util_cap is not None else 0.0))
    feasible = [f for f in found if f[3] <= 1e-12]
    if not feasible:
        util, where = lightest or (float("nan"), "?")
        raise InfeasibleError(f"util_cap {util_cap:g} ({util_scope}): no mapping found meets it; "
                              f"the lightest of {len(runs.runs)} mappings evaluated still loads "
                              f"{where} at {util:.2f}")
    front = _non_dominated(feasible)
    best = best_of(front)
    notes.update({"runs": runs_per_config, "front_size": len(front),
                  "evaluated": len(runs.runs)})
    return SearchResult(best[0], best[1], front, len(runs.runs), time.perf_counter() - t0, None,
                        notes, scored_as_run=interleave)


def _non_dominated(items) -> list[tuple[Mapping, Metrics]]:
    unique: dict[tuple, tuple] = {}
    for mapping, m, F, _ in items:
        unique.setdefault(mapping.key(), (mapping, m, F))
    vals = list(unique.values())
    F = np.array([v[2] for v in vals])
    idx = NonDominatedSorting().do(F, only_non_dominated_front=True)
    front = [(vals[i][0], vals[i][1]) for i in idx]
    return sorted(front, key=lambda mm: -mm[1].throughput)


def nsga2(problem: Problem, seed: int = 0, **options: Any) -> SearchResult:
    """NSGA-II over mappings (defaults: population 40, 40 generations per configuration)."""
    return _search(problem, "nsga2", seed, **options)


def spea2(problem: Problem, seed: int = 0, **options: Any) -> SearchResult:
    """SPEA2 over mappings (Kang et al.'s selection), same options as `nsga2`."""
    return _search(problem, "spea2", seed, **options)


nsga2.options_of = spea2.options_of = _search  # what `check_options` reads


__all__ = ["nsga2", "spea2", "objective_values", "cpu_utilisation", "OBJECTIVES"]
