"""The frame orders a plan's interleaved actors fire in (Mapping.interleave): checked, turned
into the analysis' firing orders, and read by the engines (which phase of which frame next,
how far a channel's window must reach). Choosing them is the planner's (mapping/interleaving.py)."""
from __future__ import annotations

from hetflow.dataflow.analysis.orders import Firing, FiringOrders
from hetflow.dataflow.csdf import CsdfApp
from hetflow.errors import InputError
from hetflow.plan.mapping import Mapping, group_members


def check_interleave(mapping: Mapping, app: CsdfApp, source: str = "plan") -> None:
    """InputError naming the actor unless every interleaved actor is a single element with one
    lane, and its offsets (one per phase, whole numbers >= 0) never increase and end at 0; with
    `round_frames` > 1, unless some actor interleaves and no actor is replicated or laned (a
    round of several frames is analysed on the graph unfolded that many times)."""
    for actor, offsets in mapping.interleave.items():
        where = f"{source}: mapping.interleave {actor!r}"
        if actor not in app.phases:
            raise InputError(f"{where}: the plan has no actor {actor!r}")
        if not one_frame_at_a_time(mapping, actor):
            raise InputError(f"{where}: only an actor on one element with one lane can interleave "
                             "frames (a replica group or GPU lanes already run several)")
        n = len(app.phases[actor])
        if len(offsets) != n:
            raise InputError(f"{where}: {len(offsets)} offsets for {n} phases")
        if any(not isinstance(o, int) or o < 0 for o in offsets) or offsets[-1] != 0 or any(
                a < b for a, b in zip(offsets, offsets[1:])):
            raise InputError(f"{where}: offsets {offsets} must be whole numbers >= 0 that never "
                             "increase and end at 0")
    if mapping.round_frames != 1:
        where = f"{source}: mapping.round_frames {mapping.round_frames}"
        if not mapping.interleave:
            raise InputError(f"{where}: no actor interleaves (mapping.interleave is empty)")
        for actor in app.phases:
            if not one_frame_at_a_time(mapping, actor):
                raise InputError(f"{where}: actor {actor!r} runs several frames at once "
                                 "(replicas or lanes); rounds of several frames need none")


def one_frame_at_a_time(mapping: Mapping, actor: str) -> bool:
    """An actor on one element with one lane (no replicas or lanes run frames beside it)."""
    return len(group_members(actor)) == 1 and mapping.lanes_of(actor) == 1


def firing_orders(mapping: Mapping, app: CsdfApp) -> FiringOrders:
    """The analysis' firing orders of `mapping`'s interleaved actors (processor = actor: an
    interleaved actor is one element), over the graph unfolded `round_frames` times: round i
    fires phase p of the round's frames one after the other, then phase p + 1."""
    k = mapping.round_frames
    out = {}
    for a, offs in mapping.interleave.items():
        q = len(app.phases[a])
        if any(offs) or k > 1:
            out[a] = tuple(Firing(a, j * q + p, o) for p, o in enumerate(offs) for j in range(k))
    return out


def phase_rounds(mapping: Mapping, actor: str, phases: int) -> tuple[list[int], int]:
    """The frame offset of each of `actor`'s `phases` phases and the frames of a round, as its
    worker fires them (`plan.schedule.phase_sequence`): zeros and one frame, frame by frame,
    unless the actor interleaves."""
    if actor in mapping.interleave:
        return mapping.interleave[actor], mapping.round_frames
    return [0] * phases, 1


def extra_windows(mapping: Mapping, app: CsdfApp) -> dict[str, int]:
    """Frames a channel holds beyond its FIFO window because its producer's phase runs that
    many frames ahead of its consumer's: (offset of the producing phase minus that of the
    consuming one) rounds, plus the other frames of a round; without them the producer would
    block on the window and the orders could not run as analysed."""
    off, k = mapping.interleave, mapping.round_frames
    out = {}
    for c in app.channels:
        if c.src not in off and c.dst not in off:
            continue
        d = (off[c.src][c.src_phase] if c.src in off else 0) - \
            (off[c.dst][c.dst_phase] if c.dst in off else 0)
        extra = max(0, d) * k + (k - 1)
        if extra > 0:
            out[c.name] = extra
    return out


def channel_windows(mapping: Mapping, app: CsdfApp, capacity_frames: int) -> dict[str, int]:
    """Frames the engine lets a channel hold ahead of its consumer: `capacity_frames` per
    pattern slot or worker (lane, member) of the wider end. While a slow member works on one
    frame the fast ones complete the rest of a pattern period, and outputs leave in order, so a
    smaller window would stall the fast members behind the slow one. A channel out of a
    frame-interleaved actor holds, on top, the rounds its producer runs ahead of its consumer
    (`extra_windows`)."""
    cap = max(1, capacity_frames)

    def width(a: str) -> int:
        return max(len(mapping.pattern(a)), mapping.workers(a))

    extra = extra_windows(mapping, app)
    return {c.name: cap * max(width(c.src), width(c.dst)) + extra.get(c.name, 0)
            for c in app.channels}


def frames_ahead(mapping: Mapping) -> int:
    """How many frames after a frame's first firing its last may come (0: frame by frame)."""
    rounds = max((o[0] for o in mapping.interleave.values() if o), default=0)
    return rounds * mapping.round_frames + (mapping.round_frames - 1)
