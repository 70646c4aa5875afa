"""Time a plan's stages with every element busy at once.

A stage timed alone misses what its neighbours do to it: on the GPU machine the GPU stage of a
GPU/CPU pipeline fired 0.99-1.35x slower in the run than its time alone scaled by the slowdown
the parallel baseline's whole-model copies showed (the CPU workers' Python, memory traffic are
not the same load). Here each element runs its own stages back to back in its own thread,
pinned as the runtime pins it, all elements at once, on random inputs and without channels
between them: the stage times of the plan's load, not of the plan's hand-offs (those stay in
the model).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Sequence

from hetflow.backends import caller_cores_of, pin_current_thread
from hetflow.backends.reuse import release, runners_for_many
from hetflow.model.subnet import extract_subnet

from hetflow.profile.measure import random_feeds, stats
from hetflow.backends.together import run_together

if TYPE_CHECKING:
    from hetflow.model.graph import CnnGraph
    from hetflow.platform.spec import ProcessingElement
    from hetflow.profile.profile import Stats


def time_stages_together(graph: "CnnGraph",
                         work: Sequence[tuple["ProcessingElement", Sequence[Sequence[str]]]],
                         seconds: float = 1.0, warmup: int = 2, min_samples: int = 3,
                         max_seconds: float = 60.0) -> dict[tuple[str, str], "Stats"]:
    """{(element name, subnet key): stats} for `work`, a list of (element, its stages in firing
    order). Every element cycles through its stages for at least `seconds` after all have
    warmed up, and until each stage has `min_samples` times (at most `max_seconds`)."""
    runners = []  # per work item: [(subnet key, runner, feeds)]
    wanted = [(list(layers), element, 1, f"load@{element.name}")
              for element, stages in work for layers in stages]
    built = iter(runners_for_many(graph, wanted))  # CPU sessions on a pool of threads
    try:
        for element, stages in work:
            mine = []
            for layers in stages:
                sub = extract_subnet(graph, list(layers), name=f"load@{element.name}")
                mine.append((sub.key, next(built)[0], random_feeds(graph, sub.inputs)))
            runners.append(mine)
        return _run_together(work, runners, seconds, warmup, min_samples, max_seconds)
    finally:
        release(r for mine in runners for _, r, _ in mine)
        release(r for rs in built for r in rs)  # any not handed out (a failure above)


def _run_together(work, runners, seconds, warmup, min_samples, max_seconds):

    times = [[[] for _ in mine] for mine in runners]

    def prepare(i: int) -> None:
        pin_current_thread(caller_cores_of((r for _, r, _ in runners[i]), work[i][0]))
        for _ in range(warmup):
            for _, r, feeds in runners[i]:
                r.run(feeds)

    def step(i: int) -> bool:
        for j, (_, r, feeds) in enumerate(runners[i]):
            t0 = time.perf_counter()
            r.run(feeds)
            times[i][j].append(time.perf_counter() - t0)
        return True

    def done(elapsed: float) -> bool:
        enough = all(len(s) >= min_samples for per in times for s in per)
        return (elapsed >= seconds and enough) or elapsed >= max_seconds

    run_together("timing stages under load", [e.name for e, _ in work], prepare, step, done)
    out = {}
    for (element, _), mine, per in zip(work, runners, times):
        for (key, _, _), samples in zip(mine, per):
            if samples:
                out[(element.name, key)] = stats(samples)
    return out
