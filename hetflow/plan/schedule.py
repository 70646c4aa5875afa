"""The schedule every engine runs, as data: no threads, no processes, no backends.

- `firings(app)`: one frame's firings (actor, phase) in a topological order, each with what it
  reads from the frame source and from channels, what it sends and delivers, and the firings it
  depends on in its frame. An actor's phases come in their cyclic order (Algorithm 2's order,
  so the application cannot deadlock); phase 0 of frame f+1 follows the actor's last phase of
  frame f.
- `phase_sequence`: the (frame, phase) order of one worker, frame by frame or interleaved.
- `Dispatch`: which member of a replica group (or which lane of a GPU) takes frame f, a batched
  lane a block of frames at once.
- `InOrder`: frames released in input order, each at the latest completion so far.
- `channel_windows` / `frames_in_flight`: how many frames the engines let run ahead.

"""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from hetflow.dataflow.csdf import AppChannel, CsdfApp
from hetflow.errors import InputError
import networkx as nx
from hetflow.plan.orders import channel_windows as windows


@dataclass(frozen=True)
class Firing:
    """One phase of one actor, as fired once per frame."""

    actor: str
    phase: int
    layers: tuple[str, ...]
    inputs: tuple[str, ...]  # every tensor its sub-network reads
    source_inputs: tuple[str, ...]  # model inputs it reads from the frame source
    recv: tuple[AppChannel, ...]  # channels it reads (from other actors)
    send: tuple[AppChannel, ...]  # channels it writes
    outputs: tuple[str, ...]  # model outputs it produces
    deps: tuple[int, ...]  # firings of the same frame that end before it starts
    succs: tuple[int, ...]
    first: bool  # the actor's phase 0
    last: bool  # the actor's last phase: a worker may forget the frame's tensors afterwards

    @property
    def recv_tensors(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.tensor for c in self.recv))

    @property
    def returns(self) -> tuple[str, ...]:
        """What it hands on: tensors sent on channels, then the model outputs it produces."""
        return tuple(dict.fromkeys([c.tensor for c in self.send] + list(self.outputs)))

    @property
    def where(self) -> str:
        return (f"stage {self.actor} phase {self.phase} "
                f"(layers {self.layers[0]}..{self.layers[-1]})" if self.layers
                else f"stage {self.actor} phase {self.phase}")


def firings(app: CsdfApp) -> list[Firing]:
    """The firings of one frame, producers before consumers, ties by actor then phase."""

    g = nx.DiGraph()
    rank: dict[tuple[str, int], int] = {}
    for a, ps in app.phases.items():
        for p in ps:
            g.add_node((a, p.index))
            rank[(a, p.index)] = len(rank)
            if p.index:
                g.add_edge((a, p.index - 1), (a, p.index))
    for c in app.channels:
        g.add_edge((c.src, c.src_phase), (c.dst, c.dst_phase))
    try:
        order = list(nx.lexicographical_topological_sort(g, key=rank.__getitem__))
    except nx.NetworkXUnfeasible:
        raise InputError(f"plan for {app.model_name}: its phases wait on each other in a cycle; "
                         "make the plan again") from None
    pos = {node: i for i, node in enumerate(order)}
    out = []
    for a, i in order:
        ph = app.phases[a][i]
        recv = tuple(c for c in app.channels if c.dst == a and c.dst_phase == i)
        send = tuple(c for c in app.channels if c.src == a and c.src_phase == i)
        reads = tuple(t for t, rs in app.model_inputs.items() if a in rs and t in ph.inputs)
        outs = tuple(t for t, w in app.model_outputs.items() if w == a and t in ph.outputs)
        out.append(Firing(a, i, tuple(ph.layers), tuple(ph.inputs), reads, recv, send, outs,
                          tuple(sorted(pos[p] for p in g.predecessors((a, i)))),
                          tuple(sorted(pos[s] for s in g.successors((a, i)))),
                          i == 0, i == len(app.phases[a]) - 1))
    return out


def phase_sequence(frames: Iterable[int], offsets: Sequence[int], round_frames: int = 1
                   ) -> Iterator[tuple[int, int]]:
    """(frame, phase) in the order a worker fires them: round i fires phase p of its frames
    (i + offsets[p]) * round_frames + j, j < round_frames, then phase p + 1, skipping frames it
    does not have (orders.Firing's rounds, over `round_frames` frames each). All offsets 0 and
    one frame a round: each frame's phases, frame by frame. Frames are taken from `frames`
    only when a round needs them (a dynamic dispatcher hands a frame to a member ready to
    start it)."""
    if round_frames == 1 and not any(offsets):  # frame by frame: no rounds to keep
        phases = range(len(offsets))
        for f in frames:
            for p in phases:
                yield f, p
        return
    it = iter(frames)
    got: list[int] = []  # the worker's frames so far, in order
    k = round_frames
    ahead = offsets[0] if offsets else 0
    i = -ahead
    while True:
        while len(got) < (i + ahead + 1) * k and (f := next(it, None)) is not None:
            got.append(f)
        if i * k >= len(got):
            return
        for p, o in enumerate(offsets):
            for j in range((i + o) * k, (i + o + 1) * k):
                if 0 <= j < len(got):
                    yield got[j], p
        i += 1


# ---- replica groups and lanes ------------------------------------------------------------------
class Dispatch:
    """Which frames a member of an actor takes: by the actor's static pattern (member
    pattern[f % len(pattern)] takes frame f), or dynamically (the next frame goes to whichever
    member asks first: idle members never wait on busy ones, so members of different or varying
    speed all stay busy). The lanes of one member share its frames. A batched lane takes up to
    b frames at once (`take_block`): consecutive frames from the dynamic dispatch (`blocks`:
    every take then holds the lock, so no single take splits a block), the member's next ones
    in a static pattern. A block of consecutive frames fills at the stream's rate, not at the
    member's share of it, and leaves the group together, in order."""

    def __init__(self, pattern: list[int] | None, frames: int, blocks: bool = False):
        self.pattern, self.frames, self.blocks = pattern, frames, blocks
        self._next = itertools.count()  # its __next__ is one C call: atomic under the GIL
        self._lock = threading.Lock()
        self._static: dict[int, Any] = {}  # member -> iterator over its frames

    def _frames_of(self, j: int):
        mine = [off for off, m in enumerate(self.pattern) if m == j]
        for base in range(0, self.frames, len(self.pattern)):
            for off in mine:
                if base + off < self.frames:
                    yield base + off

    def take(self, j: int) -> int | None:
        """Member j's next frame, or None when it has none left."""
        if self.pattern or self.blocks:
            block = self.take_block(j, 1)
            return block[0] if block else None
        f = next(self._next)
        return f if f < self.frames else None

    def take_block(self, j: int, n: int) -> list[int]:
        """Member j's next `n` frames, fewer at the stream's end ([] when it has none left)."""
        with self._lock:  # (a static member's generator is shared by its lanes)
            if self.pattern:
                return list(itertools.islice(self._static.setdefault(j, self._frames_of(j)), n))
            return [f for f in itertools.islice(self._next, n) if f < self.frames]

    def frames_of(self, j: int):
        while (f := self.take(j)) is not None:
            yield f


def member_of(pattern: list[int], f: int) -> int:
    """The member that takes frame f under a static pattern."""
    return pattern[f % len(pattern)]


# ---- in-order release -------------------------------------------------------------------------
class InOrder:
    """Frames 0..frames-1 leave in input order: frame f is released once it and every frame
    before it completed, at the latest of their completion times. `complete` may be called from
    any thread (one array store); `release` from one. Times are kept in arrays, and a release
    handles the frames it lets go together: the releasing thread shares the interpreter with
    the ones that drive the elements, at thousands of frames a second."""

    CHUNK = 256  # frames looked at first for completed ones; doubled while all are

    def __init__(self, frames: int) -> None:
        self.finished = np.full(frames, np.nan)  # when each frame completed
        self.released_at = np.full(frames, np.nan)
        self.next = 0  # frames below it are released
        self.last = float("-inf")

    def complete(self, f: int, at: float) -> None:
        self.finished[f] = at

    def complete_frames(self, fs: list[int], at: float) -> None:
        """`complete` for several frames at once (a batch's)."""
        self.finished[fs] = at

    @property
    def completed_at(self) -> np.ndarray:
        """When each released frame completed, in release (frame) order."""
        return self.finished[:self.next]

    def release(self, limit: int) -> tuple[int, int]:
        """Release the frames (below `limit`) that may leave now: frames [start, stop), their
        release times in `released_at[start:stop]`."""
        start = stop = self.next
        step = self.CHUNK
        while stop < limit:
            seg = self.finished[stop:min(limit, stop + step)]
            missing = np.flatnonzero(np.isnan(seg))
            if len(missing):
                stop += int(missing[0])
                break
            stop += len(seg)
            step *= 2
        if stop > start:
            at = np.maximum.accumulate(self.finished[start:stop])
            self.released_at[start:stop] = np.maximum(at, self.last)
            self.last = float(self.released_at[stop - 1])
            self.next = stop
        return start, stop


# ---- how far frames may run ahead --------------------------------------------------------------
def channel_windows(plan) -> dict[str, int]:
    """Frames each channel of `plan` may hold ahead of its consumer
    (`mapping.interleaving.channel_windows`, which the analysis of a saturated run reads too)."""

    return windows(plan.mapping, plan.app, plan.capacity_frames)


def frames_in_flight(plan) -> int:
    """One global bound (the Ray driver's): one frame per worker, all busy, plus
    `capacity_frames` dispatch periods of slack that hide the driver's round trip."""
    workers = sum(plan.mapping.workers(a) for a in plan.app.phases)
    period = max(len(plan.mapping.pattern(a)) for a in plan.app.phases)
    return workers + max(1, plan.capacity_frames) * period
