"""Streams of one model: how many an application can be given and still be admitted, and
random stream sets to test and measure the schedulability analysis on.

`largest_admitted` answers "how many cameras of this model can the machine take beside the
other applications": it searches a joint mapping at N streams of one application, doubling N
while one is found (the analysis admits it), then bisects between the last N admitted and the
first refused. More streams only add interference, so a mapping admitted at N streams admits
every smaller N; the search is a heuristic, so the answer is the largest N it found admitted.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

import numpy as np

from hetflow.errors import InfeasibleError, InputError

from hetflow.multi.problem import MultiProblem
from hetflow.multi.schedulability import AppSchedule, Task

if TYPE_CHECKING:  # (the search imports pymoo, an optional dependency; the CLI imports us)
    from hetflow.multi.search import MultiSearchResult

MAX_STREAMS = 1 << 16  # where the doubling stops: far past any element's capacity


def with_streams(mp: MultiProblem, name: str, streams: int) -> MultiProblem:
    """`mp` with application `name` given `streams` streams (the cost models shared)."""
    if name not in [a.name for a in mp.apps]:
        raise InputError(f"--max-streams {name}: no application of that name (applications: "
                         f"{', '.join(a.name for a in mp.apps)})")
    apps = [replace(a, spec=replace(a.spec, streams=streams)) if a.name == name else a
            for a in mp.apps]
    return replace(mp, apps=apps)


@dataclass
class StreamsAnswer:
    name: str
    streams: int  # the most streams admitted (0: not even one)
    result: MultiSearchResult | None  # the search at that many
    refused: str  # why one more was refused: the search's line, naming the bottleneck element
    searches: int


def largest_admitted(mp: MultiProblem, name: str,
                     search: Callable[[MultiProblem], MultiSearchResult],
                     progress: Callable[[str], None] | None = None) -> StreamsAnswer:
    """The most streams of application `name` admitted beside the others (module docstring);
    `search(mp)` returns a search result or raises InfeasibleError."""
    tried: dict[int, MultiSearchResult | str] = {}

    def attempt(n: int) -> bool:
        try:
            tried[n] = search(with_streams(mp, name, n))
        except InfeasibleError as e:
            tried[n] = str(e)
        if progress:
            progress(f"{name} at {n} streams: "
                     + ("admitted" if not isinstance(tried[n], str) else "refused"))
        return not isinstance(tried[n], str)

    low, high = 0, None  # most admitted so far, fewest refused so far
    n = 1
    while n <= MAX_STREAMS:
        if not attempt(n):
            high = n
            break
        low, n = n, 2 * n
    if high is None:
        raise InputError(f"--max-streams {name}: still admitted at {low} streams; its period "
                         "is too long to be a stream rate")
    while high - low > 1:
        mid = (low + high) // 2
        if attempt(mid):
            low = mid
        else:
            high = mid
    best = tried.get(low)
    return StreamsAnswer(name, low, best if not isinstance(best, str) else None,
                         str(tried[high]), len(tried))


# ---------------------------------------------------------------- random stream sets


def random_stream_set(rng: np.random.Generator, n_apps: int = 3, elements: int = 3,
                      max_streams: int = 6, max_lanes: int = 4, max_tasks: int = 4,
                      load: float = 0.6, batches: tuple[int, ...] = (1, 1, 2, 4)
                      ) -> tuple[list[AppSchedule], dict[str, int]]:
    """A random set of applications for the schedulability analysis: each a DAG of 1 to
    `max_tasks` tasks on elements e0..e{elements-1} (each task after one or two earlier ones,
    an element's tasks of one frame in sequence as the phases of one actor, a data delay on
    some edges), 1 to `max_streams` streams, a deadline from half to three times the period,
    distinct priorities; lanes per element (1 to `max_lanes`) and a batch per element (one of
    `batches`, each firing of b frames taking the task's time). Periods are set so that the
    elements' total utilisation is about `load` on average."""
    names = [f"e{j}" for j in range(elements)]
    lanes = {e: int(rng.integers(1, max_lanes + 1)) for e in names}
    batch = {e: int(rng.choice(batches)) for e in names}
    apps = []
    for k in range(n_apps):
        n = int(rng.integers(1, max_tasks + 1))
        tasks = [Task(f"a{k}t{i}", names[int(rng.integers(elements))],
                      float(rng.uniform(0.2, 3.0))) for i in range(n)]
        edges: dict[tuple[int, int], float] = {}
        for i in range(1, n):
            for p in rng.choice(i, size=min(i, int(rng.integers(1, 3))), replace=False):
                edges[(int(p), i)] = float(rng.choice([0.0, 0.3]))
        for i in range(n):  # one actor per element: its tasks in sequence
            later = [j for j in range(i + 1, n) if tasks[j].element == tasks[i].element]
            if later:
                edges.setdefault((i, later[0]), 0.0)
        streams = int(rng.integers(1, max_streams + 1))
        app = AppSchedule(f"A{k}", 1.0, k + 1, tasks, [(a, b, d) for (a, b), d in edges.items()])
        # this app's share of the load on its busiest element; at least one frame alone
        per_frame = max(app.busy(e) / lanes[e] for e in app.elements)
        period = streams * per_frame * n_apps / (load * float(rng.uniform(0.5, 1.5)))
        period = max(period, app.response_isolated)
        deadline = period * float(rng.choice([0.5, 1.0, 1.5, 3.0]))
        apps.append(AppSchedule(app.name, period, app.priority, tasks, app.edges, streams,
                                deadline, {e: batch[e] for e in app.elements}))
    return apps, lanes
