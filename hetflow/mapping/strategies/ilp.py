"""Kang et al.'s task-clustering ILP (2020, Section IV.A, Eq. 1-8), solved to optimality with
OR-Tools CP-SAT (default; parallel workers) or HiGHS (`solver="highs"`, scipy.optimize.milp,
exact in floating point; much slower on the larger zoo models, and the fallback when OR-Tools
cannot load). `notes["solver"]` says which ran.

Layers L_1..L_n in topological order, processing elements PE_1..PE_m of one configuration.
Binary M[i,j]: L_i runs on PE_j (Eq. 1: exactly one). dep[i,j]: some predecessor of L_i is on
PE_j (Eq. 2). Pipe[i,j] = M[i,j] and not dep[i,j]: a cluster starts at L_i on PE_j (Eq. 3).
Eq. 4: each PE holds one cluster, except that the PE holding both L_1 and L_n may hold two (the
first and last cluster, which wrap around in the pipelined schedule). The cluster time of PE_j
(Eq. 7) is the computation of its layers plus, for every layer on it, the transfer of its
output to each successor's PE; the objective (Eq. 8) is the largest cluster time.

Deviations, each stated in `notes`:
- Eq. 4 is printed as "= 1" for every PE, which would force every PE to be used (infeasible
  when there are more PEs than useful clusters, and the text says "only one pipeline stage is
  *allowed*"). The default is "<= 1"; `use_all=True` gives the printed equality.
- Eq. 5-6 (start/end times of one frame's schedule) bound no objective term: every constraint
  points forward in topological order, so some schedule always satisfies them. They are left
  out by default; `schedule=True` adds them (big-M form), which the tests use to check that the
  optimum does not change.
- Products of binaries (the transfer to the successor's PE, "L_n and L_1 on PE_j") are
  linearised exactly; a transfer term only has to be bounded from below since it is minimised.
- A layer fed only by model inputs has no predecessor, so it would start a cluster of its own
  (with three such layers even the whole model on one PE would break Eq. 4); here the earlier
  such layers count as its predecessors (the input is one producer).
- Identical PEs (same times and transfers) are interchangeable; the model orders them by first
  use (symmetry breaking: same optimum, much faster proof).
- Replica groups and call overheads are outside the formulation; the chosen mapping is then
  analysed with `evaluate()` like every other strategy's.
Times are in microseconds (CP-SAT: rounded to whole nanoseconds). Among optimal clusterings,
CP-SAT returns the one a seeded lexicographic tie-break prefers, so the answer is the same
whatever order its parallel workers find optima in.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from hetflow.errors import InfeasibleError, InputError

from hetflow.plan.mapping import Mapping
from hetflow.mapping.interleaving import RunScores
from hetflow.mapping.problem import Problem
from hetflow.mapping.strategies.base import SearchResult, configurations

US = 1e6


@dataclass
class _Model:
    """A MILP built row by row: minimise c.x subject to lb <= A x <= ub."""

    cost: list[float] = field(default_factory=list)
    integer: list[int] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    rows: list[tuple[dict[int, float], float, float]] = field(default_factory=list)

    def var(self, integer: bool = True, upper: float = 1.0, cost: float = 0.0) -> int:
        self.cost.append(cost)
        self.integer.append(int(integer))
        self.upper.append(upper)
        return len(self.cost) - 1

    def add(self, coeffs: dict[int, float], lb: float = -np.inf, ub: float = np.inf) -> None:
        self.rows.append((coeffs, lb, ub))

    def solve_highs(self, time_limit: float, gap: float) -> "_Result":
        r, c, v = [], [], []
        for k, (coeffs, _, _) in enumerate(self.rows):
            for j, a in coeffs.items():
                r.append(k)
                c.append(j)
                v.append(a)
        A = coo_array((v, (r, c)), shape=(len(self.rows), len(self.cost))).tocsr()
        with _quiet_stdout():  # HiGHS prints a line now and then even with disp=False
            res = milp(np.array(self.cost), integrality=np.array(self.integer),
                       bounds=Bounds(0, np.array(self.upper)),
                       constraints=LinearConstraint(A, [row[1] for row in self.rows],
                                                    [row[2] for row in self.rows]),
                       options={"time_limit": time_limit, "mip_rel_gap": gap, "disp": False})
        status = {0: "optimal", 2: "infeasible"}.get(res.status, "time_limit")
        return _Result(status, res.x, getattr(res, "mip_gap", None), res.message)

    def solve_cpsat(self, time_limit: float, workers: int, tiebreak: dict[int, int]
                    ) -> "_Result":
        """The same model on OR-Tools CP-SAT, which is integral: continuous variables count
        nanoseconds, so in rows that hold one, the other coefficients (microseconds) are scaled
        by 1000 and rounded to whole nanoseconds. Parallel workers find optima in different
        orders, so a lexicographic tie-break (`tiebreak` weights on binaries, secondary to the
        objective) makes the optimum unique and the answer independent of timing."""
        from ortools.sat.python import cp_model

        cp = cp_model.CpModel()
        cont = [not i for i in self.integer]
        horizon = int(1000 * sum(abs(c) for row in self.rows for c in row[0].values())) + 1
        xs = [cp.NewIntVar(0, horizon if cont[k] else int(self.upper[k]), f"x{k}")
              for k in range(len(self.cost))]
        for coeffs, lb, ub in self.rows:
            scale = 1000 if any(cont[k] for k in coeffs) else 1
            expr = sum(int(round(a if cont[k] else a * scale)) * xs[k] for k, a in coeffs.items())
            if lb > -np.inf:
                cp.Add(expr >= int(np.ceil(lb * scale - 1e-9)))
            if ub < np.inf:
                cp.Add(expr <= int(np.floor(ub * scale + 1e-9)))
        primary = sum(int(c) * xs[k] for k, c in enumerate(self.cost) if c)
        weight = sum(tiebreak.values()) + 1
        cp.Minimize(weight * primary + sum(w * xs[k] for k, w in tiebreak.items()))
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = time_limit
        solver.parameters.num_workers = workers
        # CP-SAT's own Ctrl-C handler, on by default, leaves SIGINT at the default action when
        # the solve ends: a later Ctrl-C would then kill the process instead of reaching Python
        # (a run that is stopped reports what it measured)
        solver.parameters.catch_sigint_signal = False
        code = solver.Solve(cp)
        status = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "time_limit",
                  cp_model.INFEASIBLE: "infeasible"}.get(code, "unknown")
        x = None
        if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            x = np.array([solver.Value(v) for v in xs], dtype=float)
        return _Result(status, x, None, solver.StatusName(code))


@dataclass
class _Result:
    status: str  # optimal | time_limit | infeasible | unknown
    x: np.ndarray | None
    gap: float | None
    message: str


@contextlib.contextmanager
def _quiet_stdout():
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


@dataclass
class IlpSolution:
    assignment: dict[str, str]
    objective_us: float  # Eq. 8: largest cluster time, recomputed from the assignment
    status: str
    gap: float | None
    cluster_times_us: dict[str, float]
    seconds: float
    solver: str


def _predecessors(problem: Problem) -> list[list[int]]:
    """Layer predecessors by index; a layer fed only by model inputs has the earlier such
    layers as predecessors (the input is one producer), so that they can share a cluster."""
    g = problem.graph
    preds, sources = [], []
    for i, l in enumerate(g.layers):
        p = [g.layer_index[q] for q in g.preds[l.name]]
        preds.append(p or list(sources))
        if not p:
            sources.append(i)
    return preds


def _edges(problem: Problem) -> list[tuple[int, int, int]]:
    """(producer index, consumer index, bytes) for every CNN edge (Eq. 7 sums per successor)."""
    g = problem.graph
    return [(g.layer_index[e.src], g.layer_index[e.dst], g.tensors[e.tensor].nbytes)
            for e in g.edges]


def _interchangeable(E: np.ndarray, T: list[np.ndarray], a: int, b: int) -> bool:
    if not np.array_equal(E[:, a], E[:, b]):
        return False
    perm = np.arange(E.shape[1])
    perm[[a, b]] = perm[[b, a]]
    return all(np.allclose(t, t[np.ix_(perm, perm)]) for t in T)


def solve_config(problem: Problem, config: list[str], use_all: bool = False,
                 schedule: bool = False, time_limit: float = 60.0, solver: str = "cpsat",
                 workers: int = 2, seed: int = 0, wrap: bool = True) -> IlpSolution | str | None:
    """The ILP on one configuration; None if infeasible; the solver's message if it stopped
    (time limit) before a first solution."""
    t0 = time.perf_counter()
    g = problem.graph
    n, m = len(g.layers), len(config)
    cols = [problem.element_index[e] for e in config]
    E = problem.layer_times[:, cols] * US
    finite = np.isfinite(E)
    E = np.where(finite, E, 0.0)
    edges = _edges(problem)
    memo: dict[int, np.ndarray] = {}
    T = []
    for _, _, nbytes in edges:
        if nbytes not in memo:
            memo[nbytes] = np.array([[problem.transfer(nbytes, a, b) * US for b in config]
                                     for a in config])
        T.append(memo[nbytes])
    preds = _predecessors(problem)

    mdl = _Model()
    M = [[mdl.var(upper=float(finite[i, j])) for j in range(m)] for i in range(n)]
    z = mdl.var(integer=False, upper=np.inf, cost=1.0)
    for i in range(n):  # Eq. 1
        mdl.add({M[i][j]: 1.0 for j in range(m)}, 1.0, 1.0)
    pipe = [[0] * m for _ in range(n)]
    for i in range(n):  # Eq. 2-3
        for j in range(m):
            if not preds[i]:
                pipe[i][j] = M[i][j]  # no predecessor: dep = 0, Pipe = M
                continue
            dep = mdl.var()
            for k in preds[i]:
                mdl.add({dep: 1.0, M[k][j]: -1.0}, lb=0.0)
            mdl.add({dep: 1.0, **{M[k][j]: -1.0 for k in preds[i]}}, ub=0.0)
            p = pipe[i][j] = mdl.var()
            mdl.add({p: 1.0, M[i][j]: -1.0}, ub=0.0)
            mdl.add({p: 1.0, dep: 1.0}, ub=1.0)
            mdl.add({p: 1.0, M[i][j]: -1.0, dep: 1.0}, lb=0.0)
    for j in range(m):  # Eq. 4
        coeffs = {}
        for i in range(n):
            coeffs[pipe[i][j]] = coeffs.get(pipe[i][j], 0.0) + 1.0
        if n > 1 and wrap:
            w = mdl.var()  # M[n,j] and M[1,j]
            mdl.add({w: 1.0, M[n - 1][j]: -1.0}, ub=0.0)
            mdl.add({w: 1.0, M[0][j]: -1.0}, ub=0.0)
            mdl.add({w: 1.0, M[n - 1][j]: -1.0, M[0][j]: -1.0}, lb=-1.0)
            coeffs[w] = -1.0
        mdl.add(coeffs, lb=1.0 if use_all else -np.inf, ub=1.0)
    # Eq. 7-8: z >= computation + transfers charged to PE j
    for j in range(m):
        ct = {M[i][j]: float(E[i, j]) for i in range(n)}
        for (src, dst, _), t in zip(edges, T):
            values = {float(v) for v in t[j] if v > 0}
            if not values:
                continue
            c = mdl.var(integer=False, upper=np.inf)
            ct[c] = 1.0
            for v in values:  # c >= v * (M[src,j] + sum_{k: T=v} M[dst,k] - 1)
                group = [k for k in range(m) if np.isclose(t[j, k], v)]
                mdl.add({c: 1.0, M[src][j]: -v, **{M[dst][k]: -v for k in group}}, lb=-v)
        mdl.add({z: 1.0, **{k: -a for k, a in ct.items()}}, lb=0.0)
    if schedule:
        _add_schedule(mdl, M, E, edges, T, n, m)
    for a in range(m):  # symmetry breaking: identical PEs are used in order of first use
        for b in range(a + 1, m):
            if _interchangeable(E, T, a, b):  # the next PE like a: b starts after a does
                for i in range(n):
                    mdl.add({M[i][b]: 1.0, **{M[k][a]: -1.0 for k in range(i)}}, ub=0.0)
                break
    if solver == "cpsat" and not _cpsat_loads():
        solver = "highs"  # see _cpsat_loads; same model, exact, slower on large models
    if solver == "highs":
        res = mdl.solve_highs(time_limit, gap=1e-9)
    elif solver == "cpsat":
        rng = np.random.default_rng(seed)
        res = mdl.solve_cpsat(time_limit, workers, {M[i][j]: int(rng.integers(1, 1000))
                                                    for i in range(n) for j in range(m)})
    else:
        raise InputError(f"ilp: unknown solver {solver!r} (use 'cpsat' or 'highs')")
    if res.x is None:  # infeasible, or the time ran out before a first solution
        return None if res.status == "infeasible" else res.message or res.status
    assignment = {layer.name: config[int(np.argmax([res.x[M[i][j]] for j in range(m)]))]
                  for i, layer in enumerate(g.layers)}
    ct = cluster_times(problem, config, assignment)
    return IlpSolution(assignment, max(ct.values()), res.status, res.gap, ct,
                       time.perf_counter() - t0, solver)


def _cpsat_loads() -> bool:
    """False when OR-Tools cannot load: not installed, or another HiGHS library (highspy, which
    cvxpy imports) was loaded first under the soname OR-Tools' bundled one has."""
    try:
        from ortools.sat.python import cp_model  # noqa: F401
    except ImportError:
        return False
    return True


def _add_schedule(mdl: _Model, M, E, edges, T, n: int, m: int) -> None:
    """Eq. 5-6: one frame's start times respect data and same-PE order (big-M)."""
    big = float(E.max(initial=0.0) * n + sum(t.max(initial=0.0) for t in T)) + 1.0
    start = [mdl.var(integer=False, upper=np.inf) for _ in range(n)]
    succ = {(s, d) for s, d, _ in edges}

    def end(i):  # Start(L_i) + its computation time on its PE
        return {start[i]: 1.0, **{M[i][j]: float(E[i, j]) for j in range(m)}}

    for (src, dst, _), t in zip(edges, T):  # Eq. 5
        tr = mdl.var(integer=False, upper=np.inf)
        for j in range(m):
            for k in range(m):
                if t[j, k] > 0:
                    mdl.add({tr: 1.0, M[src][j]: -t[j, k], M[dst][k]: -t[j, k]}, lb=-t[j, k])
        row = {start[dst]: 1.0, tr: -1.0}
        for v, a in end(src).items():
            row[v] = row.get(v, 0.0) - a
        mdl.add(row, lb=0.0)
    for i in range(n):  # Eq. 6
        for k in range(i + 1, n):
            if (i, k) in succ:
                continue
            for j in range(m):
                row = {start[k]: 1.0}
                for v, a in end(i).items():
                    row[v] = row.get(v, 0.0) - a
                row[M[i][j]] = row.get(M[i][j], 0.0) - big
                row[M[k][j]] = row.get(M[k][j], 0.0) - big
                mdl.add(row, lb=-2 * big)


def cluster_times(problem: Problem, config: list[str], assignment: dict[str, str]
                  ) -> dict[str, float]:
    """Eq. 7 for a given assignment, in microseconds (to check the solver's objective)."""
    g = problem.graph
    ct = {e: 0.0 for e in config}
    for l in g.layers:
        e = assignment[l.name]
        ct[e] += problem.layer_times[g.layer_index[l.name], problem.element_index[e]] * US
    for src, dst, nbytes in _edges(problem):
        a, b = assignment[g.layers[src].name], assignment[g.layers[dst].name]
        ct[a] += problem.transfer(nbytes, a, b) * US
    return ct


def clustering_ok(problem: Problem, assignment: dict[str, str], use_all: bool = False,
                  config: list[str] | None = None, wrap: bool = True) -> bool:
    """Eq. 2-4 for a given assignment (for brute-force checks)."""
    layers = [l.name for l in problem.graph.layers]
    starts: dict[str, int] = {}
    for l, preds in zip(layers, _predecessors(problem)):
        e = assignment[l]
        if not any(assignment[layers[p]] == e for p in preds):
            starts[e] = starts.get(e, 0) + 1
    wrapped = set()  # the PE holding the first and the last layer may hold two clusters
    if wrap and len(layers) > 1 and assignment[layers[0]] == assignment[layers[-1]]:
        wrapped = {assignment[layers[0]]}
    for e in config or set(assignment.values()):
        k = starts.get(e, 0) - (1 if e in wrapped else 0)
        if k > 1 or (use_all and k != 1):
            return False
    return True


def search(problem: Problem, seed: int = 0, use_all: bool = False, schedule: bool = False,
           time_limit: float = 60.0, solver: str = "cpsat", workers: int = 2, wrap: bool = True,
           interleave: bool = True, **_) -> SearchResult:
    """Solve the ILP on every configuration; the smallest largest-cluster-time wins. Its
    clustering is analysed as its plan runs it: with `interleave`, the PE holding the first and
    the last cluster (a round trip, GPU -> CPU -> GPU) runs its two clusters of different
    frames interleaved where that is faster, which is what Eq. 7-8's cluster times assume.

    `time_limit` is shared out: each configuration gets an equal share of what is left, so
    one hard configuration cannot starve the rest. A configuration whose share ran out before a
    first solution is skipped, and said so in `notes["unsolved"]`; solutions found are kept."""
    t0 = time.perf_counter()
    sols, unsolved = [], {}
    configs = configurations(problem)
    for n_done, config in enumerate(configs):
        left = time_limit - (time.perf_counter() - t0)
        if left <= 0:
            unsolved.update({"+".join(c): "time_limit ran out first" for c in configs[n_done:]})
            break
        sol = solve_config(problem, config, use_all, schedule, left / (len(configs) - n_done),
                           solver, workers, seed, wrap)
        if isinstance(sol, str):
            unsolved["+".join(config)] = f"no solution in its share of time_limit ({sol})"
        elif sol is not None:
            sols.append(sol)
    if not sols:
        if unsolved:
            raise InfeasibleError(f"ilp: no solution within time_limit {time_limit} s for any "
                                  f"configuration ({len(unsolved)} unsolved); raise time_limit")
        raise InfeasibleError("ilp: no configuration admits a task clustering"
                              + (" that uses every element (use_all=True)" if use_all else ""))
    best = min(sols, key=lambda s: s.objective_us)
    mapping, metrics = RunScores(problem, with_latency=True, interleave=interleave)(
        Mapping(best.assignment, "maximal"))
    notes = {"objective_us": best.objective_us, "status": best.status, "mip_gap": best.gap,
             "cluster_times_us": best.cluster_times_us,
             "optimal": "optimal within Kang et al.'s task-clustering formulation (Eq. 1-8, "
                        "Eq. 4 as '<= 1'" + (", printed '= 1'" if use_all else "") + ")"
                        if best.status == "optimal" else "not proven optimal (time limit)",
             "solver": best.solver, "configurations": len(sols),
             "eq5_6_schedule": schedule, "unsolved": unsolved}
    return SearchResult(mapping, metrics, [], len(sols), time.perf_counter() - t0, None, notes,
                        scored_as_run=interleave)


__all__ = ["search", "solve_config", "cluster_times", "clustering_ok", "IlpSolution"]
