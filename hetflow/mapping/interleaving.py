"""Frame-interleaved phase orders of a mapping (Mapping.interleave): checked, turned into the
analysis' firing orders, and chosen for a plan by the analysis' search (analysis/interleave.py).

An actor whose frame leaves its element between two phases (GPU -> CPU -> GPU) would otherwise
wait for the round trip on every frame; with offsets it runs the early phases of later frames
meanwhile. The local engine runs these orders; the analysis predicts them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING


from hetflow.plan.mapping import Mapping
from hetflow.plan.orders import one_frame_at_a_time
from hetflow.dataflow.analysis.interleave import best_interleaving, interleavable
from hetflow.dataflow.analysis.repetition import repetition_vector
from hetflow.errors import DeadlockError
from hetflow.mapping.problem import build_app, evaluate, timed_graph

if TYPE_CHECKING:
    from hetflow.mapping.problem import Metrics, Problem


def choose_interleave(problem, mapping: Mapping, latency_cap: float | None = None,
                      min_gain: float = 0.02, time_limit: float = 3.0,
                      rounds_of: tuple[int, ...] = (2, 4), latency_trade: float = 0.05,
                      plain=None, floor: float = 0.0):
    """`mapping` with interleaved phase orders, and its metrics, where they are analysed at
    least `min_gain` faster (and within the latency cap); else (`mapping`, None). `plain`:
    `mapping`'s metrics in frame order, if evaluated already. Orders are searched only where the
    busiest actor (`busiest_period`) leaves room above `min_gain` and above `floor` frames/s:
    no order runs an actor faster than its work allows, so elsewhere none could be chosen (or,
    under a `floor` the caller needs beaten, matter).

    Two kinds are tried: the offsets that minimise the period one frame a round (searched with
    FIFOs as deep as they need, whose windows then grow by `extra_windows`, for at most about
    `time_limit` seconds), which need a round per round trip of a frame, hence latency; and
    rounds of `rounds_of` frames without offsets (a phase of the next frames covers the round
    trip of the one before: few frames in flight), where no actor is replicated or laned.
    Among those within `latency_trade` of the fastest, the lowest latency wins (googlenet with
    a round trip every 6 layers, GPU 20x a core: offsets 43.5 frames/s at 253 ms, rounds of two
    frames 41.5 at 48 ms)."""


    if mapping.interleave:
        return mapping, None
    app = build_app(problem, mapping)
    if not any(len(ps) > 1 for ps in app.phases.values()):
        return mapping, None
    deep = timed_graph(problem, app, mapping, capacity_frames=UNBOUNDED_FRAMES)
    q = repetition_vector(deep)
    actors = interleavable(deep, q)
    if not actors:
        return mapping, None
    rate = (plain or evaluate(problem, mapping, with_latency=False)).throughput
    fastest = busiest_period(deep, q)
    if fastest > 0 and (1 + 1e-9) / fastest <= max(rate * (1 + min_gain), floor):
        return mapping, None
    candidates = []
    best = best_interleaving(deep, time_limit=time_limit)
    if best.result.period < best.plain.period * (1 - min_gain):
        candidates.append(replace(mapping, interleave={a: list(o) for a, o in
                                                       best.offsets.items() if any(o)}))
    for k in rounds_of if all(one_frame_at_a_time(mapping, a) for a in app.phases) else ():
        candidates.append(replace(mapping, interleave={a: [0] * len(app.phases[a])
                                                       for a in actors}, round_frames=k))
    scored = []
    for cand in candidates:
        try:
            metrics = evaluate(problem, cand)
        except DeadlockError:
            continue
        if metrics.throughput > rate * (1 + min_gain) and (
                latency_cap is None or metrics.latency <= latency_cap):
            scored.append((cand, metrics))
    if not scored:
        return mapping, None
    top = max(m.throughput for _, m in scored)
    return min(((c, m) for c, m in scored if m.throughput >= top * (1 - latency_trade)),
               key=lambda x: (x[1].latency, -x[1].throughput))


UNBOUNDED_FRAMES = 1 << 20  # a FIFO depth no order reaches


def busiest_period(g, q: dict[str, int]) -> float:
    """Seconds per iteration the busiest actor of timed graph `g` (repetition vector `q`) needs
    at least: its firings' times over the frames it runs at once. Whatever the firing orders,
    no period is shorter (0.0 where every actor runs unboundedly many firings at once)."""
    return max((sum(a.exec_times[i % a.phases] for i in range(q[a.name])) / a.concurrency
                for a in g.actors if a.concurrency), default=0.0)


@dataclass
class RunScores:
    """Mappings scored as their plans run them, cached by mapping key: calling it with a
    mapping gives the mapping a plan of it runs and that one's metrics, which is the mapping
    with the interleaved phase orders `choose_interleave` picks (within `latency_cap`) where it
    picks any, else the mapping itself in frame order. A search that maximises these figures
    ranks a design with round trips (GPU -> CPU -> GPU) by what its plan runs, not by its
    frame-order period, which pays every round trip.

    Orders are searched (tens of analyses) only for a mapping some actor of which has several
    phases, and, without a latency cap, only where its busiest actor leaves room above the
    fastest design scored so far (`best`): one that cannot beat it keeps its frame-order figure,
    a lower bound of what interleaving would give. `with_latency`: analyse the latency of
    mappings kept in frame order too (an interleaved one always has it)."""

    problem: Problem
    latency_cap: float | None = None
    with_latency: bool = False
    interleave: bool = True
    best: float = 0.0  # the highest throughput scored so far (without a latency cap)
    runs: dict = field(default_factory=dict)  # mapping key -> (mapping as run, its metrics)
    frame_order: dict = field(default_factory=dict)  # mapping key -> its metrics in frame order

    def __call__(self, mapping: Mapping) -> tuple[Mapping, Metrics]:

        key = mapping.key()
        if key not in self.runs:
            plain = self.frame_order[key] = evaluate(self.problem, mapping,
                                                     with_latency=self.with_latency)
            run = (mapping, plain)
            if self.interleave:
                floor = self.best if self.latency_cap is None else 0.0
                chosen, metrics = choose_interleave(self.problem, mapping, self.latency_cap,
                                                    plain=plain, floor=floor)
                if metrics is not None:
                    run = (chosen, metrics)
            self.runs[key] = run
            if self.latency_cap is None and run[1].throughput < float("inf"):
                self.best = max(self.best, run[1].throughput)
        return self.runs[key]
