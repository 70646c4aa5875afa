"""Multi-objective search of a joint mapping of several applications (Kang et al., Section VI-B).

Chromosome: for one configuration of the platform, one gene per layer of every application (the
applications' blocks one after the other), the index of the element the layer runs on among the
configuration's elements that application's profile covers; then one gene per element of the
configuration with lanes or batches to choose (a GPU whose profiles measured lane counts or
batches), the index of its (lanes, batch) pair among `MultiProblem.server_options`: with the
element's lanes shared, one gene for the element; with lanes of its own per application
(`own`), one gene per application that may run there (see `multi.problem`). Fewer lanes fire
faster, more lanes and batches take more streams. Both ways are searched where two or more
applications may share a GPU, and the fronts merged. Objectives (minimised): the
predicted worst response time of each application (`schedulability.response_bound`) and the
total energy per second (when every element has a power). A mapping that misses a deadline
(Eq. 11 fails for a task, or the bound exceeds the deadline) gets `PENALTY` added to that
application's term, as in the paper, and is dropped from the reported front.

NSGA-II or SPEA2 from pymoo with operators that suit the encoding: crossover swaps whole
application blocks (or cuts one block at a point), mutation re-assigns a contiguous run of
layers to one element, moves a stage border, or moves a whole application (most good mappings
are a few contiguous stages). The initial population holds each application on each element,
HEFT per application, and random contiguous pipelines. The search runs once per configuration
and the fronts are merged. Every evaluated mapping that meets all deadlines is kept; the front
is their non-dominated set.
"""
from __future__ import annotations

import multiprocessing
import signal
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np
from pymoo.core.crossover import Crossover
from pymoo.core.mutation import Mutation
from pymoo.core.problem import Problem as PymooProblem
from pymoo.optimize import minimize
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

from hetflow.errors import InfeasibleError, InputError
from hetflow.plan.mapping import Mapping
from hetflow.platform.detect import usable_cores
from hetflow.mapping.strategies.ga import RowDuplicates

from hetflow.multi.problem import MultiProblem, check_periods, device_frames, own_servers, schedule_of
from hetflow.multi.schedulability import PENALTY, AppAnalysis, AppSchedule, analyse, energy_rate, penalty, utilisation
from hetflow.mapping.strategies.greedy import greedy_assignment

ALGORITHMS = ("nsga2", "spea2")
ARCHIVE_LIMIT = 2000  # feasible mappings kept before pruning to the non-dominated ones
PREFER = ("margin", "energy")
GPU_LANES = ("auto", "shared", "own")


def lane_ways(mp: MultiProblem, gpu_lanes: str) -> list[bool]:
    """Which ways of giving a GPU's lanes to search (True: each application its own): auto
    searches both where two applications may share a laned element (else they are one)."""
    if gpu_lanes != "auto":
        return [gpu_lanes == "own"]
    laned = {e for e in mp.elements if len(mp.server_options(e)) > 1}
    users = [sum(1 for a in mp.apps if e in a.problem.element_index) for e in laned]
    return [False, True] if any(n > 1 for n in users) else [False]


# ---------------------------------------------------------------- encoding


Server = tuple  # (application index, or None for the element's shared lanes; element)


@dataclass
class JointEncoding:
    mp: MultiProblem
    config: list[str]
    own: bool = False  # lanes of its own per application on a laned element
    allowed: list[list[str]] = field(init=False)  # per app: elements its genes index
    layers: list[list[str]] = field(init=False)
    blocks: list[tuple[int, int]] = field(init=False)  # per app: [lo, hi) gene range
    servers: list[Server] = field(init=False)  # who has a (lanes, batch) gene, at the end
    server_options: list[list[tuple[int, int]]] = field(init=False)  # per server gene

    def __post_init__(self) -> None:
        self.allowed, self.layers, self.blocks = [], [], []
        lo = 0
        for a in self.mp.apps:
            have = {e.name for e in a.problem.elements}
            self.allowed.append([e for e in self.config if e in have])
            self.layers.append([l.name for l in a.graph.layers])
            self.blocks.append((lo, lo + len(self.layers[-1])))
            lo += len(self.layers[-1])
        options = {e: self.mp.server_options(e) for e in self.config}
        laned = [e for e in self.config if len(options[e]) > 1]
        self.servers = ([(i, e) for e in laned for i, al in enumerate(self.allowed) if e in al]
                        if self.own else [(None, e) for e in laned])
        self.server_options = [options[e] for _, e in self.servers]

    @property
    def apps_end(self) -> int:
        return self.blocks[-1][1]

    @property
    def n_var(self) -> int:
        return self.apps_end + len(self.servers)

    @property
    def server_blocks(self) -> list[tuple[int, int]]:
        return [(self.apps_end + j, self.apps_end + j + 1) for j in range(len(self.servers))]

    @property
    def upper(self) -> np.ndarray:
        return np.concatenate([np.full(hi - lo, len(al) - 1)
                               for (lo, hi), al in zip(self.blocks, self.allowed)]
                              + [np.array([len(o) - 1 for o in self.server_options], dtype=int)])

    def decode_servers(self, server_genes: np.ndarray) -> dict[Server, tuple[int, int]]:
        """Server -> (lanes, batch) of a chromosome's server genes (`x[apps_end:]`)."""
        return {sv: opts[int(g)] for sv, opts, g in zip(self.servers, self.server_options,
                                                       server_genes)}

    def decode_app(self, i: int, genes, servers: dict[Server, tuple[int, int]] | None = None
                   ) -> Mapping:
        al = self.allowed[i]
        assignment = {l: al[int(g)] for l, g in zip(self.layers[i], genes)}
        servers = servers or {}
        mine = {e: servers.get((i, e), servers.get((None, e)))
                for e in set(assignment.values())}
        return Mapping(assignment, lanes={e: kb[0] for e, kb in mine.items() if kb},
                       batch={e: kb[1] if kb else 1 for e, kb in mine.items()})

    def decode(self, x: np.ndarray) -> list[Mapping]:
        servers = self.decode_servers(x[self.apps_end:])
        return [self.decode_app(i, x[lo:hi], servers) for i, (lo, hi) in enumerate(self.blocks)]

    def server_genes(self, choose: Callable[[str, list[tuple[int, int]]], int]) -> np.ndarray:
        """Server genes with `choose(element, options)` picking each element's option index."""
        return np.array([choose(e, o) for (_, e), o in zip(self.servers, self.server_options)],
                        dtype=np.int64)

    def encode_app(self, i: int, mapping: Mapping) -> np.ndarray | None:
        pos = {e: k for k, e in enumerate(self.allowed[i])}
        try:
            return np.array([pos[mapping.assignment[l]] for l in self.layers[i]], dtype=np.int64)
        except KeyError:
            return None


# ---------------------------------------------------------------- evaluation


@dataclass
class Candidate:
    config: list[str]
    mappings: list[Mapping]  # per app, in the problem's order
    schedules: list[AppSchedule]
    analysis: dict[str, AppAnalysis]
    energy: float | None  # J/s
    objectives: np.ndarray  # penalised, as the search saw them
    lanes: dict[str, int] = field(default_factory=dict)  # element -> lanes (absent: 1)
    batch: dict[str, int] = field(default_factory=dict)  # element -> batch (absent: 1)
    # lanes of its own per application (`lanes`/`batch` keyed by `pool_name`): element -> the
    # frames the whole device holds at once; empty: every element's lanes are shared
    device_frames: dict[str, int] = field(default_factory=dict)

    @property
    def own_lanes(self) -> bool:
        return bool(self.device_frames)

    @property
    def feasible(self) -> bool:
        return all(a.schedulable for a in self.analysis.values())

    @property
    def margin(self) -> float:
        """Largest predicted worst response as a share of its deadline (lower = more room)."""
        return max(a.response_worst / a.relative_deadline for a in self.analysis.values())

    @property
    def utilisation(self) -> dict[str, float]:
        return utilisation(self.schedules, self.lanes)


def joint_servers(mappings: list[Mapping]) -> tuple[dict[str, int], dict[str, int]]:
    """The lanes and batch of each element the mappings use: one of each per element, shared
    by every application on it."""
    out: tuple[dict[str, int], dict[str, int]] = ({}, {})
    for m in mappings:
        for what, given, into in (("lanes", m.lanes, out[0]), ("batch", m.batch, out[1])):
            for e, k in given.items():
                if into.setdefault(e, k) != k:
                    raise InputError(f"element {e} is given {what} {into[e]} by one "
                                     f"application and {k} by another; it is the element's")
    return out


def evaluate_joint(mp: MultiProblem, mappings: list[Mapping], config: list[str] | None = None,
                   with_energy: bool = True, schedules: list[AppSchedule] | None = None,
                   own: bool = False, device: dict[str, int] | None = None) -> Candidate:
    """Analyse one joint mapping: schedules, Eq. 11, response bounds, energy, objectives.
    `own`: each application has lanes of its own on a laned element (else the element's are
    shared by all of them); `device`: its `device_frames`, where the caller has them."""
    if not own:
        device = {}
    elif device is None:
        device = device_frames(mp, mappings)
    if device:
        lanes, batch, powers = own_servers(mp, mappings, device)
    else:
        (lanes, batch), powers = joint_servers(mappings), mp.powers()
    schedules = schedules or [schedule_of(a, m, {e: device[e] for e in m.elements if e in device})
                              for a, m in zip(mp.apps, mappings)]
    analysis = analyse(schedules, lanes)
    for s in schedules:  # never runs, whatever its bound
        if s.deadlock is not None:
            analysis[s.name] = replace(analysis[s.name], schedulable=False,
                                       bottleneck=f"a batch that cannot fill ({s.deadlock})")
    energy = energy_rate(schedules, powers, lanes)
    f = [analysis[a.name].response_worst + penalty(analysis[a.name]) for a in mp.apps]
    if with_energy:
        f.append(energy if energy is not None else 0.0)
    used = config or sorted({e for s in schedules for e in s.elements})
    return Candidate(list(used), mappings, schedules, analysis, energy, np.array(f), lanes,
                     {e: b for e, b in batch.items() if b > 1}, device)


class _Evaluator:
    """Joint evaluation with a per-application cache (an app's schedule depends only on its own
    genes, and crossover passes whole blocks on)."""

    def __init__(self, mp: MultiProblem, enc: JointEncoding, with_energy: bool):
        self.mp, self.enc, self.with_energy = mp, enc, with_energy
        self.cache: list[dict[bytes, AppSchedule]] = [{} for _ in mp.apps]
        self.count = 0

    def schedule(self, i: int, genes: np.ndarray, server_genes: np.ndarray, mapping: Mapping,
                 device: dict[str, int]) -> AppSchedule:
        own = {e: device[e] for e in mapping.elements if e in device}
        key = genes.tobytes() + server_genes.tobytes() + repr(sorted(own.items())).encode()
        c = self.cache[i]
        if key not in c:
            if len(c) > 20000:  # bounded memory on long runs
                c.clear()
            c[key] = schedule_of(self.mp.apps[i], mapping, own)
        return c[key]

    def __call__(self, x: np.ndarray) -> Candidate:
        self.count += 1
        server_genes = x[self.enc.apps_end:]
        mappings = self.enc.decode(x)
        device = device_frames(self.mp, mappings) if self.enc.own else {}
        scheds = [self.schedule(i, x[lo:hi], server_genes, m, device)
                  for i, ((lo, hi), m) in enumerate(zip(self.enc.blocks, mappings))]
        return evaluate_joint(self.mp, mappings, self.enc.config, self.with_energy, scheds,
                              self.enc.own, device)


class _PymooProblem(PymooProblem):
    def __init__(self, enc: JointEncoding, n_obj: int, on_eval: Callable[[np.ndarray], np.ndarray]):
        super().__init__(n_var=enc.n_var, n_obj=n_obj, xl=np.zeros(enc.n_var), xu=enc.upper,
                         vtype=int)
        self.on_eval = on_eval

    def _evaluate(self, X, out, *args, **kwargs):
        X = np.asarray(np.rint(X), dtype=np.int64)
        out["F"] = np.array([self.on_eval(x) for x in X])


# ---------------------------------------------------------------- operators


class AppBlockCrossover(Crossover):
    """Per application block: swap it whole (p=0.4), cut it at one point (p=0.2), or keep it."""

    def __init__(self, blocks: list[tuple[int, int]], prob: float = 0.9):
        super().__init__(2, 2, prob=prob)
        self.blocks = blocks

    def _do(self, problem, X, random_state=None, **kwargs):
        a, b = X[0].copy(), X[1].copy()
        for m in range(a.shape[0]):
            for lo, hi in self.blocks:
                r = random_state.random()
                if r < 0.4:
                    cut = lo
                elif r < 0.6 and hi - lo > 1:
                    cut = int(random_state.integers(lo + 1, hi))
                else:
                    continue
                a[m, cut:hi], b[m, cut:hi] = b[m, cut:hi].copy(), a[m, cut:hi].copy()
        return np.stack([a, b])


class SegmentMutation(Mutation):
    """One change per chromosome in one application's block: a contiguous run of layers to one
    element (p=0.5), a stage border moved (p=0.35), or the whole application to one element."""

    def __init__(self, blocks: list[tuple[int, int]], upper: np.ndarray, prob: float = 0.9):
        super().__init__(prob=prob)
        self.blocks, self.upper = blocks, upper

    def _do(self, problem, X, random_state=None, **kwargs):
        X = np.asarray(np.rint(X), dtype=np.int64).copy()
        rs = random_state
        for row in X:
            lo, hi = self.blocks[int(rs.integers(len(self.blocks)))]
            n, top = hi - lo, int(self.upper[lo])
            r = rs.random()
            if r < 0.5:
                length = min(n, 1 + int(rs.geometric(min(1.0, 6.0 / n))))
                start = lo + int(rs.integers(0, n - length + 1))
                row[start:start + length] = rs.integers(0, top + 1)
            elif r < 0.85:
                borders = np.flatnonzero(np.diff(row[lo:hi])) + lo + 1
                if len(borders) == 0:
                    continue
                at = int(borders[rs.integers(len(borders))])
                shift = 1 + int(rs.geometric(0.3))
                if rs.random() < 0.5:  # the left stage grows
                    row[at:min(hi, at + shift)] = row[at - 1]
                else:
                    row[max(lo, at - shift):at] = row[at]
            else:
                row[lo:hi] = rs.integers(0, top + 1)
        return X


# ---------------------------------------------------------------- seeds


def best_single_element(app, elements: list[str]) -> str:
    layers = [l.name for l in app.graph.layers]
    return min(elements, key=lambda e: app.problem.actor_time(layers, e))


def naive_mappings(mp: MultiProblem) -> list[Mapping]:
    """Each application whole on its own fastest element (the baseline the issue names), a
    laned element at the lane count of its best throughput (`MultiProblem.best_lanes`): the
    fastest of one configuration, the one holding the first application's fastest element.
    Elements that share cores (cpu0-1 and cpu0) are never used together: the analysis takes
    them for separate processors, and on the 2-core VM a set so mapped ran mobilenet_v2 at
    23.9 ms worst against a bound of 7.7 ms."""
    first = mp.apps[0]
    top = best_single_element(first, [x.name for x in first.problem.elements])
    config = next((c for c in mp.configurations() if top in c), [top])
    out = []
    for a in mp.apps:
        have = {x.name for x in a.problem.elements}
        e = best_single_element(a, [x for x in config if x in have] or sorted(have))
        lanes = {e: mp.best_lanes(e)} if len(mp.lane_options(e)) > 1 else {}
        out.append(Mapping({l.name: e for l in a.graph.layers}, lanes=lanes, batch={e: 1}))
    return out


def _app_seeds(enc: JointEncoding, i: int) -> list[np.ndarray]:

    a, n = enc.mp.apps[i], len(enc.layers[i])
    seeds = [np.full(n, k, dtype=np.int64) for k in range(len(enc.allowed[i]))]
    heft = enc.encode_app(i, Mapping(greedy_assignment(a.problem, enc.allowed[i])))
    if heft is not None:
        seeds.append(heft)
    return seeds


def _random_pipeline(n: int, n_el: int, rs: np.random.Generator) -> np.ndarray:
    k = int(rs.integers(1, min(3, n, n_el) + 1))
    cuts = np.sort(rs.choice(np.arange(1, n), k - 1, replace=False)) if k > 1 else []
    els = rs.choice(n_el, k, replace=False)
    genes = np.empty(n, dtype=np.int64)
    for s, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, n])):
        genes[lo:hi] = els[s]
    return genes


def initial_population(enc: JointEncoding, pop_size: int, rs: np.random.Generator) -> np.ndarray:
    seeds = [_app_seeds(enc, i) for i in range(len(enc.blocks))]
    best = [enc.encode_app(i, Mapping({l: best_single_element(a, enc.allowed[i])
                                       for l in enc.layers[i]}))
            for i, a in enumerate(enc.mp.apps)]
    top = enc.server_genes(lambda e, o: o.index((enc.mp.best_lanes(e), 1)))
    rows = [np.concatenate([*best, top]), np.concatenate([*(s[-1] for s in seeds), top])]
    while len(rows) < pop_size:
        lanes = top if not enc.servers or rs.random() < 0.5 else \
            enc.server_genes(lambda e, o: rs.integers(len(o)))
        if len(rows) < pop_size // 2:
            rows.append(np.concatenate([*(s[int(rs.integers(len(s)))] for s in seeds), lanes]))
        else:
            rows.append(np.concatenate([*(_random_pipeline(len(enc.layers[i]), len(al), rs)
                                          for i, al in enumerate(enc.allowed)), lanes]))
    return np.array(rows[:pop_size], dtype=np.int64)


# ---------------------------------------------------------------- search


@dataclass
class MultiSearchResult:
    chosen: Candidate
    front: list[Candidate]
    naive: Candidate
    evaluations: int
    seconds: float
    objectives: list[str]
    notes: dict = field(default_factory=dict)


def naive_result(mp: MultiProblem) -> MultiSearchResult:
    """The naive joint mapping (each app on its fastest element) as a search result, so that it
    can be written and run as a multi-plan to compare with the searched one."""
    t0 = time.perf_counter()
    cand = evaluate_joint(mp, naive_mappings(mp))
    return MultiSearchResult(cand, [cand], cand, 1, time.perf_counter() - t0, [],
                             {"algorithm": "naive"})


def _front(cands: list[Candidate]) -> list[Candidate]:
    if not cands:
        return []
    F = np.array([c.objectives for c in cands])
    idx = NonDominatedSorting().do(F, only_non_dominated_front=True)
    seen, out = set(), []
    for i in sorted(idx, key=lambda i: tuple(F[i])):
        key = tuple(np.round(F[i], 9))
        if key not in seen:
            seen.add(key)
            out.append(cands[i])
    return out


def choose(front: list[Candidate], prefer: str = "margin") -> Candidate:
    """margin: the smallest largest response/period (most room for what the model misses;
    ties broken by the next largest, and so on); energy: the least energy per second (ties:
    margin)."""
    if prefer not in PREFER:
        raise InputError(f"--prefer {prefer!r}: use {' or '.join(PREFER)}")
    def energy(c):
        return c.energy if c.energy is not None else 0.0

    if prefer == "energy":
        return min(front, key=lambda c: (energy(c), c.margin))
    def ratios(c):  # largest first: compared as a whole, the leximax order
        return tuple(sorted((round(a.response_worst / a.relative_deadline, 6)
                             for a in c.analysis.values()), reverse=True))

    return min(front, key=lambda c: (ratios(c), energy(c)))


def _miss_message(mp: MultiProblem, c: Candidate, searched: int) -> str:
    worst = max(c.analysis.values(), key=lambda a: a.missed_by / a.relative_deadline)
    el = worst.bottleneck
    k = c.lanes.get(el, 1)
    share = ", ".join(f"{s.name} {s.streams * s.busy(el) / s.batch_of(el) / s.period / k:.0%}"
                      for s in c.schedules if el in s.elements)
    what = "period" if worst.deadline is None else "deadline"
    return (f"no mapping found that meets every deadline ({searched} joint mappings searched); "
            f"at best application {worst.name} misses its {worst.relative_deadline * 1e3:.3g} ms "
            f"{what}: predicted worst response {worst.response_worst * 1e3:.3g} ms, Eq. 11 slack "
            f"{worst.eq11_min_slack * 1e3:.3g} ms; bottleneck element {el}"
            f"{f' x{k}' if k > 1 else ''} (busy {c.utilisation.get(el, 0.0):.0%}: {share})")


@dataclass
class _Found:
    """What the search of one configuration and way of giving lanes found."""
    kept: dict[bytes, Candidate]  # feasible candidates, the non-dominated when many
    closest: Candidate | None  # the infeasible one that misses its deadlines by least
    count: int  # mappings evaluated


def _closer(a: Candidate | None, b: Candidate | None) -> Candidate | None:
    """Of two infeasible candidates, the one that misses its deadlines by less in all (`a` on
    a tie); either where the other is None."""
    if a is None or b is None:
        return a or b
    missed = [sum(x.missed_by for x in c.analysis.values()) for c in (a, b)]
    return b if missed[1] < missed[0] else a


def _prune(kept: dict[bytes, Candidate]) -> dict[bytes, Candidate]:
    """Only the non-dominated can reach the front: the rest go once there are many."""
    if len(kept) <= ARCHIVE_LIMIT:
        return kept
    front = {id(c) for c in _front(list(kept.values()))}
    return {k: c for k, c in kept.items() if id(c) in front}


def _search_way(mp: MultiProblem, own: bool, config: list[str], seed: np.random.SeedSequence,
                algorithm: str, pop_size: int, generations: int, mutation: float,
                crossover: float, with_energy: bool) -> _Found:
    """NSGA-II or SPEA2 over the joint mappings of one configuration and way of giving lanes,
    its randomness from `seed` alone (the same plan whichever process runs it)."""
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.algorithms.moo.spea2 import SPEA2

    rs = np.random.default_rng(seed)
    enc = JointEncoding(mp, config, own)
    ev = _Evaluator(mp, enc, with_energy)
    found = _Found({}, None, 0)

    def on_eval(x: np.ndarray) -> np.ndarray:
        cand = ev(x)
        if cand.feasible:
            found.kept.setdefault(x.tobytes() + str((own, config)).encode(), cand)
            found.kept = _prune(found.kept)
        else:
            found.closest = _closer(found.closest, cand)
        return cand.objectives

    n_obj = len(mp.apps) + (1 if with_energy else 0)
    ops = dict(pop_size=pop_size, sampling=initial_population(enc, pop_size, rs),
               crossover=AppBlockCrossover(enc.blocks + enc.server_blocks, crossover),
               mutation=SegmentMutation(enc.blocks + enc.server_blocks, enc.upper, mutation),
               eliminate_duplicates=RowDuplicates())
    algo = NSGA2(**ops) if algorithm == "nsga2" else SPEA2(**ops)
    minimize(_PymooProblem(enc, n_obj, on_eval), algo, ("n_gen", generations),
             seed=int(rs.integers(2**31)), verbose=False)
    found.count = ev.count
    return found


_FORKED: list[Callable[[int], _Found]] = []  # the job forked workers inherit (`each_way`)


def _run_forked(i: int) -> _Found:
    return _FORKED[0](i)


def _worker_start() -> None:
    # Ctrl-C reaches the whole process group: the parent stops the pool; SIGTERM is how the
    # pool stops a worker, so it must not go through the parent's handler inherited here
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def search_workers() -> int:
    """Processes the search may use: the cores this process may run on."""
    return len(usable_cores())


def each_way(job: Callable[[int], _Found], n: int, workers: int,
             each: Callable[[int, _Found], None]) -> int:
    """each(i, job(i)) for i = 0 ... n - 1 in order, as the jobs end, over up to `workers`
    forked processes where this process has one thread (a fork copies another thread's held
    locks and not the thread), else here; the processes that ran them. The ways are
    independent searches of about equal size (16 of about 2 s each for three CNNs on 12 cores
    and a GPU), and a fork shares the problem, which would be tens of MB to send to a fresh
    interpreter."""
    workers = min(workers, n)
    if workers <= 1 or threading.active_count() > 1 or \
            "fork" not in multiprocessing.get_all_start_methods():
        for i in range(n):
            each(i, job(i))
        return 1
    _FORKED[:] = [job]
    try:
        with multiprocessing.get_context("fork").Pool(workers, _worker_start) as pool:
            for i, got in enumerate(pool.imap(_run_forked, range(n))):
                each(i, got)
    finally:
        _FORKED.clear()
    return workers


def search_multi(mp: MultiProblem, algorithm: str = "nsga2", pop_size: int = 48,
                 generations: int = 40, seed: int = 0, prefer: str = "margin",
                 mutation: float = 0.9, crossover: float = 0.9,
                 configs: list[list[str]] | None = None,
                 progress: Callable[[str], None] | None = None,
                 gpu_lanes: str = "auto", workers: int | None = None) -> MultiSearchResult:
    """NSGA-II or SPEA2 over joint mappings, once per configuration and way of giving lanes
    (`gpu_lanes`: shared, own or auto, both), in up to `workers` processes (default: one a
    core; the result does not depend on it); see the module docstring."""
    if algorithm not in ALGORITHMS:
        raise InputError(f"unknown algorithm {algorithm!r} (use {' or '.join(ALGORITHMS)})")
    if prefer not in PREFER:
        raise InputError(f"--prefer {prefer!r}: use {' or '.join(PREFER)}")
    if gpu_lanes not in GPU_LANES:
        raise InputError(f"--gpu-lanes {gpu_lanes!r}: use {', '.join(GPU_LANES)}")
    if pop_size < 4 or generations < 1:
        raise InputError("the population needs at least 4 mappings and 1 generation")
    check_periods(mp)
    t0 = time.perf_counter()
    configs = configs or mp.configurations()
    # energy is an objective when every element has a power (else it would compare unknowns)
    with_energy = all(w is not None for w in mp.powers().values())
    naive = evaluate_joint(mp, naive_mappings(mp), with_energy=with_energy)
    ways = [(own, config) for own in lane_ways(mp, gpu_lanes) for config in configs]
    seeds = np.random.SeedSequence(seed).spawn(len(ways))

    def job(i: int) -> _Found:
        return _search_way(mp, *ways[i], seeds[i], algorithm, pop_size, generations, mutation,
                           crossover, with_energy)

    kept: dict[bytes, Candidate] = {}
    closest: Candidate | None = naive if not naive.feasible else None
    total = 0

    def take(ci: int, got: _Found) -> None:
        nonlocal kept, closest, total
        kept = _prune({**kept, **got.kept})
        closest = _closer(closest, got.closest)
        total += got.count
        if progress:
            own, config = ways[ci]
            lanes = " lanes of each application's own" if own else ""
            progress(f"configuration {ci + 1}/{len(ways)} ({' '.join(config)}{lanes}): "
                     f"{got.count} mappings, {len(got.kept)} kept that meet every deadline")

    used = each_way(job, len(ways), search_workers() if workers is None else workers, take)
    feasible = list(kept.values()) + ([naive] if naive.feasible else [])
    if not feasible:
        raise InfeasibleError(_miss_message(mp, closest, total))
    front = _front(feasible)
    names = [f"{a.name}_response_s" for a in mp.apps] + (["energy_j_per_s"] if with_energy else [])
    return MultiSearchResult(choose(front, prefer), front, naive, total,
                             time.perf_counter() - t0, names,
                             {"algorithm": algorithm, "pop_size": pop_size,
                              "generations": generations, "seed": seed, "prefer": prefer,
                              "configurations": len(configs), "gpu_lanes": gpu_lanes,
                              "processes": used})


__all__ = ["JointEncoding", "Candidate", "device_frames", "lane_ways", "MultiSearchResult", "evaluate_joint", "search_multi",
           "naive_mappings", "naive_result", "choose", "initial_population", "AppBlockCrossover",
           "SegmentMutation", "PENALTY"]
