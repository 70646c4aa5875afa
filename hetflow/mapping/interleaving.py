"""Frame-interleaved phase orders of a mapping (Mapping.interleave): checked, turned into the
analysis' firing orders, and chosen for a plan by the analysis' search (analysis/interleave.py).

An actor whose frame leaves its element between two phases (GPU -> CPU -> GPU) would otherwise
wait for the round trip on every frame; with offsets it runs the early phases of later frames
meanwhile. The local engine runs these orders; the analysis predicts them.
"""
from __future__ import annotations

from dataclasses import replace

from hetflow.dataflow.analysis.orders import Firing, FiringOrders
from hetflow.dataflow.csdf import CsdfApp
from hetflow.errors import InputError

from .mapping import Mapping, group_members


def check_interleave(mapping: Mapping, app: CsdfApp, source: str = "plan") -> None:
    """InputError naming the actor unless every interleaved actor is a single element with one
    lane, and its offsets (one per phase, whole numbers >= 0) never increase and end at 0."""
    for actor, offsets in mapping.interleave.items():
        where = f"{source}: mapping.interleave {actor!r}"
        if actor not in app.phases:
            raise InputError(f"{where}: the plan has no actor {actor!r}")
        if len(group_members(actor)) > 1 or mapping.lanes_of(actor) > 1:
            raise InputError(f"{where}: only an actor on one element with one lane can interleave "
                             "frames (a replica group or GPU lanes already run several)")
        n = len(app.phases[actor])
        if len(offsets) != n:
            raise InputError(f"{where}: {len(offsets)} offsets for {n} phases")
        if any(not isinstance(o, int) or o < 0 for o in offsets) or offsets[-1] != 0 or any(
                a < b for a, b in zip(offsets, offsets[1:])):
            raise InputError(f"{where}: offsets {offsets} must be whole numbers >= 0 that never "
                             "increase and end at 0")


def firing_orders(mapping: Mapping) -> FiringOrders:
    """The analysis' firing orders of `mapping`'s interleaved actors (processor = actor: an
    interleaved actor is one element)."""
    return {a: tuple(Firing(a, i, o) for i, o in enumerate(offs))
            for a, offs in mapping.interleave.items() if any(offs)}


def extra_windows(mapping: Mapping, app: CsdfApp) -> dict[str, int]:
    """Frames a channel holds beyond its FIFO window because its producer's phase runs that
    many rounds ahead of its consumer's (offset of the producing phase minus that of the
    consuming one); without them the producer would block on the window and the orders could
    not run as analysed."""
    off = mapping.interleave
    out = {}
    for c in app.channels:
        d = (off[c.src][c.src_phase] if c.src in off else 0) - \
            (off[c.dst][c.dst_phase] if c.dst in off else 0)
        if d > 0:
            out[c.name] = d
    return out


def frames_ahead(mapping: Mapping) -> int:
    return max((o[0] for o in mapping.interleave.values() if o), default=0)


def choose_interleave(problem, mapping: Mapping, latency_cap: float | None = None,
                      min_gain: float = 0.02, time_limit: float = 5.0):
    """`mapping` with the firing orders that minimise its analysed period, and its metrics,
    where they are analysed at least `min_gain` faster (and within the latency cap); else
    (`mapping`, None). Orders add frames in flight, hence latency: a small gain is not worth it.

    The orders are searched with FIFOs as deep as they need (their windows then grow by
    `extra_windows`), for at most about `time_limit` seconds; the plan's metrics come from the
    cost model with those windows."""
    from hetflow.dataflow.analysis.interleave import best_interleaving, interleavable
    from hetflow.dataflow.analysis.repetition import repetition_vector

    from .problem import build_app, evaluate, timed_graph

    if mapping.interleave:
        return mapping, None
    app = build_app(problem, mapping)
    if not any(len(ps) > 1 for ps in app.phases.values()):
        return mapping, None
    deep = timed_graph(problem, app, mapping, capacity_frames=UNBOUNDED_FRAMES)
    if not interleavable(deep, repetition_vector(deep)):
        return mapping, None
    best = best_interleaving(deep, time_limit=time_limit)
    if not best.result.period < best.plain.period * (1 - min_gain):
        return mapping, None
    offsets = {f_.actor: [0] * len(app.phases[f_.actor]) for o in best.orders.values()
               for f_ in o}
    for order in best.orders.values():
        for f_ in order:
            offsets[f_.actor][f_.firing] = f_.frame_offset
    chosen = replace(mapping, interleave=offsets)
    metrics = evaluate(problem, chosen)
    if not metrics.throughput > evaluate(problem, mapping, with_latency=False).throughput * (
            1 + min_gain):
        return mapping, None
    if latency_cap is not None and not metrics.latency <= latency_cap:
        return mapping, None
    return chosen, metrics


UNBOUNDED_FRAMES = 1 << 20  # a FIFO depth no order reaches
