"""Schedule-based schedulability of several periodic applications sharing elements
(Kang et al. 2020, Section VI), and a response-time bound used as the search objective.

Each application is one frame's task DAG (the phases of its CSDF app, Algorithm 2) released every
`period`, with a deadline (the period unless given). Its *schedule* is the ASAP schedule of one frame alone: tasks of
one actor are in sequence, tasks on different elements overlap, a channel adds its transfer delay.

The paper's terms:
- MAI (maximum allowable interference) of a task: its mobility, ALAP start (from the deadline)
  minus ASAP start.
- dbf_pe(A, t) (maximum resource demand): the most time application A, following its schedule
  every period, keeps element pe busy within any window of length t (any offset: A's phase
  relative to the analysed application is unknown).
- Eq. 10 (preemptive):      MAI_i - sum_{hp in H(i)} dbf_{M(i)}(hp, P_i)                 >= 0
- Eq. 11 (non-preemptive):  MAI_i - sum_{hp in H(i)} dbf_{M(i)}(hp, P_i) - max_{lp} C_lp >= 0
  where lp ranges over tasks of lower-priority applications on the same element (the one that
  may be running when task i becomes ready: GPUs and our element workers do not preempt).
  With streams and lanes: each of hp's N_h streams demands its dbf, in a window of the
  deadline D_i, and the element's k lanes share the demand (sum / k).

Eq. 10/11 test each task against its own slack and, as the paper's footnote 5 says, do not carry
one task's delay over to its successors. For the *response time* objective (and the runtime's
predicted worst case) we add the classic non-preemptive response-time bound, per task and then
along the frame's DAG: a ready task waits at most w = B + sum_hp rbf(w + L), where B is the
longest lower-priority firing on its element, rbf the most higher-priority firing time that can
become ready in a window (request bound, whole firings), and L its own previous phase on the
element; the frame's worst response is the longest path with every task costing wait + time.
A higher-priority application's firings may become ready later than in its schedule by up to
their own worst ready time minus ASAP (release jitter J, from its analysis), which widens its
window to w + L + J. A mapping is
schedulable when Eq. 11 holds for every task *and* the bound is within the deadline.

Streams, deadlines and lanes. The scheduling model:
- an application is N >= 1 streams of one frame DAG, each released every period from its own
  unknown offset; a frame must be done `deadline` after its release (default the period; a
  longer deadline lets several frames of a stream be in flight, and frames of one stream do not
  wait for each other);
- an element has k >= 1 identical lanes (k > 1: a GPU running k firings at once, each taking
  its one-lane time times the profile's lane slowdown at k); whenever a lane is free it starts
  the waiting firing of the highest priority, among equal priority (the streams of one
  application) the one ready first; a started firing is never preempted;
- an element with a batch b > 1 (`AppSchedule.batch`) fires up to b waiting frames of one task
  at once, the first as above and the oldest others of that task, in the task's time
  whatever their count (a partial batch is padded).
Where k = 1 and the application has one stream with deadline <= period, the bound is the one
above. Elsewhere it is the carry-in bound: while task i (ready at r) waits, all k lanes are busy
(a free lane would take it), with lower-priority firings started before r (at most one per
lane, B each at most), higher-priority firings ready in (r - R_h, r + w] (R_h: the most a
firing of h on the element takes from ready to done, from h's analysis; one ready earlier is
done by r) and same-application firings ready in (r - R_own, r] (served first come first
served; R_own from this application's own analysis, iterated to a fixed point from below), so
    w = B + (sum_hp N_h rbf_h(w + R_h) + N_own rbf_own(R_own) - C_i) / k,
where the own term counts this task itself once (C_i removed) and, with deadline <= period,
only the other N - 1 streams (a stream's previous frame is done by the next release: the bound
holds where it is within the period, as it is wherever the deadline is met). Several streams
of one model are thus one application whose N phase-unknown streams queue first come first
served; each stream's rbf takes its worst offset on its own, so no offsets are assumed.
With a batch b > 1 the own term is `batched_ahead`: the M frames of task i ahead of it fill
whole batches, floor(M / b) firings (one begun while it waits that had room would have taken
it), each other own task there fires once a frame ahead, and a batch of its own begun before r
joins the blocking term. Higher-priority batches count a firing per frame (each has a distinct
first frame in the window). tests/multi/lane_simulate.py simulates this model.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from hetflow.errors import InputError

PENALTY = 1e3  # seconds added to a missed application's objective ("cannot be selected")
EPS = 1e-12
MAX_ITER = 200


@dataclass(frozen=True)
class Task:
    name: str
    element: str
    time: float  # seconds per firing (C)


@dataclass
class AppSchedule:
    """One frame of one application as a task DAG, released every `period` seconds by each of
    its `streams` (their offsets unknown); a frame is due `deadline` after its release."""

    name: str
    period: float
    priority: int  # lower number = higher priority
    tasks: list[Task]
    edges: list[tuple[int, int, float]] = field(default_factory=list)  # (from, to, delay s)
    streams: int = 1
    deadline: float | None = None  # None: the period
    batch: dict[str, int] = field(default_factory=dict)  # element -> frames a firing (1)
    # why its batches cannot fill (`mapping.problem.check_batches`): it never runs, whatever
    # its bound; None where they can
    deadlock: str | None = None

    @property
    def relative_deadline(self) -> float:
        return self.period if self.deadline is None else self.deadline

    def batch_of(self, element: str) -> int:
        return self.batch.get(element, 1)

    @property
    def overlaps(self) -> bool:
        """Whether firings of this application's own frames can wait for each other: several
        streams, or several frames of a stream in flight (a deadline past the period)."""
        return self.streams > 1 or self.relative_deadline > self.period

    def __post_init__(self) -> None:
        n = len(self.tasks)
        self.preds: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        self.succs: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        for a, b, d in self.edges:
            if not (0 <= a < n and 0 <= b < n) or a == b:
                raise InputError(f"application {self.name}: bad task edge {a}->{b}")
            self.succs[a].append((b, d))
            self.preds[b].append((a, d))
        indeg = [len(p) for p in self.preds]
        ready = [i for i in range(n) if indeg[i] == 0]
        order: list[int] = []
        while ready:
            i = ready.pop()
            order.append(i)
            for j, _ in self.succs[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    ready.append(j)
        if len(order) != n:
            raise InputError(f"application {self.name}: its task graph has a cycle")
        self.order = order
        self.times = np.array([t.time for t in self.tasks], dtype=float)
        self.element_of = [t.element for t in self.tasks]
        self._on: dict[str, list[int]] = {}
        self.dbf_cache: dict[tuple[str, float, float], float] = {}  # memo of dbf()

    @cached_property
    def elements(self) -> list[str]:
        return list(dict.fromkeys(self.element_of))

    def on(self, element: str) -> list[int]:
        if element not in self._on:
            self._on[element] = [i for i, e in enumerate(self.element_of) if e == element]
        return self._on[element]

    @cached_property
    def asap(self) -> np.ndarray:
        """Earliest start of every task, the frame released at 0 and the app alone."""
        s = np.zeros(len(self.tasks))
        for i in self.order:
            for p, d in self.preds[i]:
                s[i] = max(s[i], s[p] + self.times[p] + d)
        return s

    @cached_property
    def tails(self) -> np.ndarray:
        """Longest time from the end of each task to the end of the frame."""
        tail = np.zeros(len(self.tasks))
        for i in reversed(self.order):
            for j, d in self.succs[i]:
                tail[i] = max(tail[i], d + self.times[j] + tail[j])
        return tail

    @cached_property
    def response_isolated(self) -> float:
        return float((self.asap + self.times).max()) if self.tasks else 0.0

    def alap(self, deadline: float | None = None) -> np.ndarray:
        """Latest start of every task such that the frame still ends by `deadline`."""
        deadline = self.relative_deadline if deadline is None else deadline
        return deadline - self.times - self.tails

    def mobility(self, deadline: float | None = None) -> np.ndarray:
        """MAI: ALAP minus ASAP start (negative: the task is late even with no interference)."""
        return self.alap(deadline) - self.asap

    def busy(self, element: str) -> float:
        """Time on `element` per frame of one stream."""
        return float(sum(self.times[i] for i in self.on(element)))

    def longest(self, element: str) -> float:
        return float(max((self.times[i] for i in self.on(element)), default=0.0))


def dbf(app: AppSchedule, element: str, t: float, jitter: float = 0.0) -> float:
    """Maximum time `app` keeps `element` busy in any window of length `t`, its schedule
    repeating every period; with `jitter`, each firing may start up to that much after its ASAP
    time, which is covered by a window of t + jitter on the fixed schedule."""
    if t <= 0:
        return 0.0
    key = (element, t, jitter)
    hit = app.dbf_cache.get(key)
    if hit is None:
        hit = app.dbf_cache[key] = _window_demand(app, element, t + max(0.0, jitter))
    return min(hit, t)


def _window_demand(app: AppSchedule, element: str, w: float) -> float:
    idx = app.on(element)
    if not idx:
        return 0.0
    p = app.period
    s = app.asap[idx]
    e = s + app.times[idx]
    # the demand is piecewise linear in the window's start x; its maximum is at a breakpoint,
    # where either end of the window meets either end of a firing (x taken modulo the period)
    x = np.unique(np.concatenate([s, e, s - w, e - w]) % p)[:, None, None]
    k = np.arange(np.floor(-e.max() / p), np.ceil((p + w - s.min()) / p) + 1)[None, None, :] * p
    lo = np.maximum(s[None, :, None] + k, x)
    hi = np.minimum(e[None, :, None] + k, x + w)
    return float(np.clip(hi - lo, 0.0, None).sum(axis=(1, 2)).max())


def higher(app: AppSchedule, apps: list[AppSchedule]) -> list[AppSchedule]:
    return [a for a in apps if a.priority < app.priority]


def lower(app: AppSchedule, apps: list[AppSchedule]) -> list[AppSchedule]:
    return [a for a in apps if a.priority > app.priority]


def blocking(app: AppSchedule, element: str, apps: list[AppSchedule]) -> float:
    """Non-preemptive blocking on `element`: the longest firing of a lower-priority app there
    (on k lanes, one such firing per lane, shared by the k lanes: the same per lane)."""
    return max((lp.longest(element) for lp in lower(app, apps)), default=0.0)


def lanes_of(lanes: dict[str, int] | None, element: str) -> int:
    return (lanes or {}).get(element, 1)


def eq10_slack(app: AppSchedule, apps: list[AppSchedule],
               lanes: dict[str, int] | None = None) -> np.ndarray:
    """Eq. 10 per task: MAI - sum over higher-priority apps (each stream) of dbf on its
    element in the deadline D_i (P_i by default), shared by the element's lanes."""
    mai = app.mobility()
    hp = higher(app, apps)
    window = app.relative_deadline
    demand = {e: sum(h.streams * dbf(h, e, window) for h in hp) / lanes_of(lanes, e)
              for e in app.elements}
    return np.array([mai[i] - demand[app.element_of[i]] for i in range(len(app.tasks))])


def eq11_slack(app: AppSchedule, apps: list[AppSchedule],
               lanes: dict[str, int] | None = None) -> np.ndarray:
    """Eq. 11 per task: Eq. 10 minus the non-preemptive blocking term."""
    block = {e: blocking(app, e, apps) for e in app.elements}
    return eq10_slack(app, apps, lanes) - np.array([block[e] for e in app.element_of])


def rbf(app: AppSchedule, element: str, t: float, jitter: float = 0.0) -> float:
    """Request bound: the most firing time of `app` on `element` that can become ready within
    a closed window of length `t` (a firing that becomes ready while a lower-priority task waits
    runs first, whole). With `jitter`, a firing may become ready up to that much after its ASAP
    start, which a window of t + jitter on the fixed schedule covers."""
    key = ("rbf", element, t, jitter)
    hit = app.dbf_cache.get(key)
    if hit is not None:
        return hit
    idx = app.on(element)
    w = max(0.0, t) + max(0.0, jitter)
    total = 0.0
    if idx:
        p = app.period
        s = app.asap[idx]
        c = app.times[idx]
        x = (s % p)[:, None]  # the busiest window starts where some firing becomes ready
        tol = 1e-12 * max(1.0, p)
        count = np.floor((x + w - s[None, :] + tol) / p) - np.ceil((x - s[None, :] - tol) / p) + 1
        total = float((np.maximum(count, 0.0) * c[None, :]).sum(axis=1).max())
    app.dbf_cache[key] = total
    return total


def release_jitter(app: AppSchedule, ready: np.ndarray | None = None) -> dict[str, float]:
    """Per element, how much later than its ASAP start a task of `app` may become ready, given
    each task's worst ready time (`worst_times`); none given: the app follows its schedule."""
    late = np.zeros(len(app.tasks)) if ready is None else ready - app.asap
    return {e: float(max(0.0, max(late[i] for i in app.on(e)))) for e in app.elements}


def local_response(app: AppSchedule, ready: np.ndarray | None = None,
                   finish: np.ndarray | None = None) -> dict[str, float]:
    """Per element, the longest a firing of `app` there takes from ready to done (its wait and
    its time); none given: no wait, its longest firing."""
    if ready is None or finish is None:
        return {e: app.longest(e) for e in app.elements}
    return {e: float(max(finish[i] - ready[i] for i in app.on(e))) for e in app.elements}


@dataclass(frozen=True)
class Reach:
    """What an application's analysis found of its firings on each element: how much later
    than its schedule one may become ready (`jitter`) and the longest one takes from ready to
    done (`local`)."""

    jitter: dict[str, float]
    local: dict[str, float]

    @staticmethod
    def of(app: AppSchedule, ready: np.ndarray | None = None,
           finish: np.ndarray | None = None) -> "Reach":
        return Reach(release_jitter(app, ready), local_response(app, ready, finish))

    def covers(self, other: "Reach") -> bool:
        return all(self.jitter[e] + EPS >= other.jitter[e] and
                   self.local[e] + EPS >= other.local[e] for e in other.jitter)

    def join(self, other: "Reach") -> "Reach":
        return Reach({e: max(v, other.jitter[e]) for e, v in self.jitter.items()},
                     {e: max(v, other.local[e]) for e, v in self.local.items()})


def task_wait(app: AppSchedule, i: int, apps: list[AppSchedule],
              jitter: dict[str, dict[str, float]], limit: float,
              lanes: dict[str, int] | None = None,
              local: dict[str, dict[str, float]] | None = None,
              own: Reach | None = None) -> float:
    """Longest time task i can wait, once ready, before a lane of its element starts it.

    One lane and no frames of its own application in the way (one stream, deadline <= period):
    the classic non-preemptive bound w = B + sum_hp rbf(w + L), B the longest lower-priority
    firing there, L the task's own previous phase on the element in this frame (higher-priority
    firings that became ready while it ran are still pending when task i becomes ready; a phase
    0's predecessor ran in the previous frame, at least period - response earlier, and is not
    counted). Elsewhere the carry-in bound of the module docstring, with
    `local[app name][element]` the higher-priority applications' ready-to-done bounds and `own`
    this application's (missing: they follow their schedule, no wait).
    `jitter[app name][element]`: how late higher-priority firings may become ready."""
    e = app.element_of[i]
    k = lanes_of(lanes, e)
    hp = higher(app, apps)
    block = blocking(app, e, apps)
    if k > 1 or app.overlaps or app.batch_of(e) > 1:
        reach = {h.name: (local or {}).get(h.name, {}).get(e, h.longest(e)) for h in hp}
        own = own or Reach.of(app)
        if app.batch_of(e) > 1:
            same = batched_ahead(app, i, own)
            block = max(block, app.longest(e))  # a batch of its own begun before, not full
        else:
            frames_in_way = (app.streams if app.relative_deadline > app.period
                             else app.streams - 1)
            same = frames_in_way * rbf(app, e, own.local[e], own.jitter[e])
            if app.relative_deadline > app.period:  # the window holds task i itself once
                same -= app.times[i]
        same = max(0.0, float(same))
    else:
        look_back = max((app.times[p] for p, _ in app.preds[i] if app.element_of[p] == e),
                        default=0.0)
        reach = {h.name: look_back for h in hp}
        same = 0.0

    def demand(w: float) -> float:
        return block + (same + sum(
            h.streams * rbf(h, e, w + reach[h.name], jitter.get(h.name, {}).get(e, 0.0))
            for h in hp)) / k

    w = demand(0.0)
    for _ in range(MAX_ITER):
        nxt = demand(w)
        if nxt <= w + EPS or nxt > limit:
            return max(w, nxt)
        w = nxt
    return w


def batched_ahead(app: AppSchedule, i: int, own: Reach) -> float:
    """Firing time of `app`'s own frames that start on task i's element while it waits there,
    the element firing b frames of one task at a time: frames of task i ahead of it (ready in
    the own reach before it, first come first served) fill whole batches (a batch begun while
    it waits that had room would have taken it), so floor(M / b) of them; each other task of
    the application there fires at most once a frame ahead (each batch has a distinct first
    frame ahead of task i)."""
    e = app.element_of[i]
    b = app.batch_of(e)
    past = app.relative_deadline > app.period  # the stream's own frames may be ahead too
    in_way = app.streams if past else app.streams - 1
    window = own.local[e] + own.jitter[e]

    def frames(t: float) -> int:  # of one task of one stream, ready in a closed window t
        return int(np.floor((t + 1e-12 * max(1.0, app.period)) / app.period)) + 1

    ahead = in_way * frames(window) - (1 if past else 0)
    total = (ahead // b) * app.times[i]
    for j in app.on(e):
        if j != i:
            total += in_way * frames(window) * app.times[j]
    return float(total)


def default_limit(app: AppSchedule) -> float:
    """Where waits stop growing: 4 deadlines (or periods, the longer): a miss either way."""
    return 4 * max(app.period, app.relative_deadline)


def worst_times(app: AppSchedule, apps: list[AppSchedule],
                hp_ready: dict[str, np.ndarray] | None = None,
                limit: float | None = None, lanes: dict[str, int] | None = None,
                hp_local: dict[str, dict[str, float]] | None = None,
                own: Reach | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Worst ready and finish time of every task of one frame (released at 0): along the DAG,
    a task is ready when its last predecessor's data arrives and finishes after its wait bound
    (`task_wait`) and its time. `hp_ready[name]`: the worst ready times found for each
    higher-priority app (their firings' release jitter); `hp_local[name]`: their ready-to-done
    bounds per element (`local_response`); missing: they follow their schedule. `own`: this
    app's own reach (for its other streams and frames). Waits stop growing past `limit`
    (default `default_limit`): a miss either way."""
    limit = default_limit(app) if limit is None else limit
    jit = {h.name: release_jitter(h, (hp_ready or {}).get(h.name)) for h in higher(app, apps)}
    ready = np.zeros(len(app.tasks))
    finish = np.zeros(len(app.tasks))
    for i in app.order:
        ready[i] = max((finish[p] + d for p, d in app.preds[i]), default=0.0)
        finish[i] = ready[i] + task_wait(app, i, apps, jit, limit, lanes, hp_local, own) \
            + app.times[i]
    return ready, finish


def frame_bounds(app: AppSchedule, apps: list[AppSchedule],
                 hp_ready: dict[str, np.ndarray] | None = None,
                 hp_local: dict[str, dict[str, float]] | None = None,
                 lanes: dict[str, int] | None = None,
                 limit: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`worst_times` with the application's own reach (its other streams' and frames' firings
    in the way) iterated to its least fixed point, from its schedule upwards."""
    limit = default_limit(app) if limit is None else limit
    own = Reach.of(app)
    for _ in range(MAX_ITER):
        ready, finish = worst_times(app, apps, hp_ready, limit, lanes, hp_local, own)
        if not app.overlaps:
            break
        found = Reach.of(app, ready, finish)
        if own.covers(found) or (len(finish) and finish.max() > limit):
            break
        own = own.join(found)
    return ready, finish


def response_bound(app: AppSchedule, apps: list[AppSchedule],
                   hp_ready: dict[str, np.ndarray] | None = None,
                   limit: float | None = None, lanes: dict[str, int] | None = None,
                   hp_local: dict[str, dict[str, float]] | None = None) -> float:
    """Worst response time of one frame: its last task's worst finish (`frame_bounds`)."""
    _, finish = frame_bounds(app, apps, hp_ready, hp_local, lanes, limit)
    return float(finish.max()) if len(finish) else 0.0


@dataclass
class AppAnalysis:
    name: str
    period: float
    priority: int
    response_isolated: float  # s, the ASAP schedule alone
    response_worst: float  # s, the bound with interference and blocking
    eq11_min_slack: float  # s, the smallest Eq. 11 slack over the app's tasks
    eq11_ok: bool
    schedulable: bool  # Eq. 11 holds for every task and response_worst <= deadline
    # where Eq. 11 fails or holds: the element of the task with the least Eq. 11 slack (the
    # busiest among ties); where only the bound misses the deadline: the element its frame
    # waits on longest (Eq. 11 does not see an application's own streams)
    bottleneck: str
    task_slack: dict[str, float] = field(default_factory=dict)  # task -> Eq. 11 slack
    deadline: float | None = None  # s; None: the period
    streams: int = 1

    @property
    def relative_deadline(self) -> float:
        return self.period if self.deadline is None else self.deadline

    @property
    def missed_by(self) -> float:
        return max(0.0, self.response_worst - self.relative_deadline, -self.eq11_min_slack)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def utilisation(apps: list[AppSchedule], lanes: dict[str, int] | None = None
                ) -> dict[str, float]:
    """Busy share of every element: sum over apps of streams x (time per frame on it) /
    period, over its lanes (a batch of b frames: a b-th of its firing a frame, as if full)."""
    u: dict[str, float] = {}
    for a in apps:
        for e in a.elements:
            u[e] = u.get(e, 0.0) + (a.streams * a.busy(e) / a.batch_of(e) / a.period
                                    / lanes_of(lanes, e))
    return u


def analyse(apps: list[AppSchedule], lanes: dict[str, int] | None = None
            ) -> dict[str, AppAnalysis]:
    """Eq. 11 and the response bound for every application, highest priority first; `lanes`:
    element -> lanes (absent: 1)."""
    prios = [a.priority for a in apps]
    if len(set(prios)) != len(prios):
        raise InputError("priority clash: two applications share a priority")
    util = utilisation(apps, lanes)
    out: dict[str, AppAnalysis] = {}
    ready: dict[str, np.ndarray] = {}
    local: dict[str, dict[str, float]] = {}
    for app in sorted(apps, key=lambda a: a.priority):
        slack = eq11_slack(app, apps, lanes)
        ready[app.name], finish = frame_bounds(app, apps, ready, local, lanes)
        local[app.name] = local_response(app, ready[app.name], finish)
        r = float(finish.max()) if len(finish) else 0.0
        min_slack = float(slack.min()) if len(slack) else 0.0
        tied = [i for i in range(len(slack)) if slack[i] <= min_slack + 1e-9]
        neck = max((app.element_of[i] for i in tied), key=lambda e: util.get(e, 0.0),
                   default="")
        ok = min_slack >= -EPS
        if ok and r > app.relative_deadline + EPS:
            waited = finish - ready[app.name] - app.times
            neck = max(app.elements, key=lambda e: (sum(waited[i] for i in app.on(e)),
                                                    util.get(e, 0.0)))
        out[app.name] = AppAnalysis(
            app.name, app.period, app.priority, app.response_isolated, r, min_slack, ok,
            ok and r <= app.relative_deadline + EPS, neck,
            {t.name: float(s) for t, s in zip(app.tasks, slack)}, app.deadline, app.streams)
    return out


def penalty(analysis: AppAnalysis) -> float:
    """What the search adds to a missed application's response-time objective (Kang et al.:
    'a large penalty is added to the term so that it cannot be selected')."""
    return 0.0 if analysis.schedulable else PENALTY


def energy_rate(apps: list[AppSchedule], power: dict[str, float | None],
                lanes: dict[str, int] | None = None) -> float | None:
    """Joules per second of running every app at its period: sum of streams x C x power /
    period, a firing on k lanes drawing a k-th of the element's power, one of b frames a b-th
    of it (full batches). None when an element used has no known power."""
    total = 0.0
    for a in apps:
        for i, e in enumerate(a.element_of):
            w = power.get(e)
            if w is None:
                return None
            total += (a.streams * a.times[i] * w / a.batch_of(e) / a.period
                      / lanes_of(lanes, e))
    return total
