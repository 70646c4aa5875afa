"""Each worker's schedule compiled to a list of actions: plain data, a pure function of the plan.

A worker is a member of an actor's replica group (each lane of a laned device runs the same
program on the frames it takes). Its `Program` is one round of actions, repeated round after
round on the frames the worker takes from its group's dispatch:

- `recv`: take a tensor of the frame from a channel (it waits for the producer);
- `fire`: run one phase of the actor on the frame (a first phase that reads model inputs first
  loads them from the frame source, not before the frame arrives);
- `send`: put a tensor of the frame on a channel (it waits for room in the channel's window);
- `deliver`: hand on the model outputs the actor produces and forget the frame's tensors.

An action names its frame by `slot`: round i acts on the worker's own frame i * round_frames +
slot (frames it takes in order; a slot before the first or after the last frame is skipped).
Frame by frame, a round is one frame; with interleaved phase orders (`phase_sequence`), phase p
of a round acts on frames `offsets[p]` rounds ahead, so the first rounds and the last ones act
on fewer frames. The parallel copies' design (the whole model on each element, no channels) is
two actions a round: fire the whole model, deliver.

A batched worker (its element's `batch` b > 1) runs the same actions frame by frame but fires
each phase once on up to b frames: it receives (or loads) each frame's inputs of the first
phase until b frames are there, the oldest waiting frame has waited `batch_wait` seconds since
its arrival at the element (0: no waiting for more), or the stream ends (a partial batch, which
the runner pads); then, phase by phase, it receives each frame's inputs, fires once on the
batch and sends each frame's tensors, and delivers each frame (`batch_phases`).

`rounds` unrolls a program over the frames a worker takes, round by round: the one loop every
engine runs (`runtime.loop`) and `worker_actions`, the schedule that `hetflow run PLAN
--schedule` prints, iterate it alike.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from hetflow.errors import InputError
from hetflow.plan.orders import phase_rounds
from hetflow.plan.mapping import group_members
from hetflow.plan.plan import Plan

from hetflow.plan.schedule import Firing, firings

RECV, FIRE, SEND, DELIVER = "recv", "fire", "send", "deliver"


@dataclass(frozen=True)
class Action:
    kind: str  # recv | fire | send | deliver
    slot: int  # which frame of the round (see the module's text)
    phase: int  # the actor's phase it belongs to
    channel: str = ""  # recv, send: the channel
    peer: str = ""  # recv: the producing actor; send: the consuming actor
    # recv, send: the tensor; fire: model inputs loaded from the frame source before it runs;
    # deliver: the model outputs handed on
    tensors: tuple[str, ...] = ()

    def text(self, frame: str) -> str:
        if self.kind == FIRE:
            load = f" (loads {', '.join(self.tensors)})" if self.tensors else ""
            return f"fire phase {self.phase} of frame {frame}{load}"
        if self.kind == RECV:
            return f"recv {self.tensors[0]} of frame {frame} from {self.peer} ({self.channel})"
        if self.kind == SEND:
            return f"send {self.tensors[0]} of frame {frame} to {self.peer} ({self.channel})"
        return (f"deliver frame {frame}: {', '.join(self.tensors)}" if self.tensors
                else f"end frame {frame} (no model output here)")


@dataclass(frozen=True)
class Program:
    """One worker's actions for one round."""

    actor: str
    member: int  # index in the actor's replica group
    members: int  # size of the group
    element: str
    lanes: int  # lanes of the element, each running this program on the frames it takes
    round_frames: int
    ahead: int  # rounds the first phase runs ahead of the round (its offset)
    actions: tuple[Action, ...]
    pattern: tuple[int, ...] | None  # static dispatch: member pattern[f % len] takes frame f
    batch: int = 1  # frames a firing takes (each lane's)
    batch_wait: float = 0.0  # s a partial batch waits for more frames (see the module's text)

    @property
    def span(self) -> int:
        """Frames whose tensors the worker may hold at once."""
        return (self.ahead + 1) * self.round_frames

    def static_frames(self, limit: int) -> list[int] | None:
        """The frames below `limit` it takes where dispatch fixes them (a static pattern, or a
        group of one worker of one lane); None where they go to whichever worker asks first."""
        if self.pattern is None:
            return list(range(limit)) if self.members == self.lanes == 1 else None
        return [f for f in range(limit) if self.pattern[f % len(self.pattern)] == self.member]


def batch_phases(program: Program) -> list[tuple[tuple[Action, ...], Action, tuple[Action, ...]]]:
    """A batched program's actions phase by phase: (receives, fire, sends and delivery); each
    receive and send acts on every frame of the batch, the fire once on all of them."""
    by_phase: dict[int, tuple[list, list, list]] = {}
    for a in program.actions:  # (frame by frame: every action of one round is on slot 0)
        pre, fire, post = by_phase.setdefault(a.phase, ([], [], []))
        (pre if a.kind == RECV else fire if a.kind == FIRE else post).append(a)
    return [(tuple(pre), fire[0], tuple(post)) for pre, fire, post in by_phase.values()]


def round_actions(steps: list[Firing], offsets: list[int], round_frames: int
                  ) -> tuple[Action, ...]:
    """One round of one actor's phases (`steps`, in phase order) at `offsets` (rounds ahead of
    the round, per phase) over `round_frames` frames a round."""
    loads = tuple(dict.fromkeys(t for fi in steps for t in fi.source_inputs))
    outputs = tuple(dict.fromkeys(t for fi in steps for t in fi.outputs))
    acts: list[Action] = []
    for fi, off in zip(steps, offsets):
        for j in range(round_frames):
            slot = off * round_frames + j
            acts += [Action(RECV, slot, fi.phase, c.name, c.src, (c.tensor,)) for c in fi.recv]
            acts.append(Action(FIRE, slot, fi.phase, tensors=loads if fi.first else ()))
            acts += [Action(SEND, slot, fi.phase, c.name, c.dst, (c.tensor,)) for c in fi.send]
            if fi.last:
                acts.append(Action(DELIVER, slot, fi.phase, tensors=outputs))
    return tuple(acts)


def batch_cycle(plan: Plan, actor: str) -> str | None:
    """A channel into a later phase of `actor` whose producer takes, through any chain of
    channels, what `actor` sends in an earlier phase; None if there is none. Batched, such an
    actor waits for the later inputs of every frame of its batch while the producer, fire by
    fire frame by frame, waits for the batch's earlier outputs: it could never fire."""
    after: dict[str, set[str]] = {}
    for c in plan.app.channels:
        after.setdefault(c.src, set()).add(c.dst)
    reach, todo = set(), [actor]
    while todo:
        for nxt in after.get(todo.pop(), ()):
            if nxt not in reach:
                reach.add(nxt)
                todo.append(nxt)
    first = min(ph.index for ph in plan.app.phases[actor])
    for c in plan.app.channels:
        if c.dst == actor and c.dst_phase != first and c.src in reach:
            return c.name
    return None


def compile_programs(plan: Plan) -> list[Program]:
    """Every worker's program, actor by actor in the order of `firings`, members in group
    order."""
    by_actor: dict[str, list[Firing]] = {}
    for fi in firings(plan.app):
        by_actor.setdefault(fi.actor, []).append(fi)
    static = plan.mapping.dispatch_mode == "static"
    out = []
    for actor, steps in by_actor.items():
        steps.sort(key=lambda fi: fi.phase)
        offsets, k = phase_rounds(plan.mapping, actor, len(steps))
        acts = round_actions(steps, list(offsets), k)
        pattern = tuple(plan.mapping.pattern(actor)) if static else None
        members = group_members(actor)
        for el in members:
            b = plan.mapping.batch_of(el)
            if b < 1:
                raise InputError(f"element {el}: batch {b} (a firing takes at least 1 frame)")
            if b > 1 and (k > 1 or any(offsets)):
                raise InputError(f"element {el}: a batched element (b{b}) fires its phases "
                                 f"frame by frame, but stage {actor} interleaves them")
            if b > 1 and (loop := batch_cycle(plan, actor)) is not None:
                raise InputError(f"element {el}: a batched element (b{b}) cannot run stage "
                                 f"{actor}: its channel {loop} closes a cycle through the "
                                 f"stage's own earlier phases, so a batch would wait on itself")
        out += [Program(actor, member=j, members=len(members), element=el,
                        lanes=plan.mapping.lanes_of(el), round_frames=k,
                        ahead=max(offsets, default=0), actions=acts, pattern=pattern,
                        batch=plan.mapping.batch_of(el),
                        batch_wait=float(plan.mapping.batch_wait.get(el, 0.0)))
                for j, el in enumerate(members)]
    return out


def rounds(program: Program, frames: Iterable[int]) -> Iterator[tuple[int, list[int]]]:
    """(base, got) for each round: round i acts on frame got[base + slot] of each action whose
    base + slot falls in got (`got`: the worker's recent frames, in the order taken). Frames
    are taken from `frames` only when a round needs them (a dynamic dispatcher hands a frame
    to a worker ready to start it). `got` keeps only the frames a round can still reach: a run
    of millions of frames holds a few, and base + slot stays congruent, modulo the program's
    span, to the frame's index among the worker's frames."""
    it = iter(frames)
    k, ahead = program.round_frames, program.ahead
    if k == 1 and not ahead:  # frame by frame: a round is the next frame (the common case)
        got = [0]
        for f in it:
            got[0] = f
            yield 0, got
        return
    got: list[int] = []
    span, dropped = program.span, 0  # dropped: frames taken before got[0], a multiple of span
    i = -ahead
    while True:
        need = (i + ahead + 1) * k - dropped
        while len(got) < need and (f := next(it, None)) is not None:
            got.append(f)
        base = i * k - dropped
        if base >= len(got):
            return
        yield base, got
        i += 1
        if base >= 64 * span:  # the next round acts on got[base + k:]: drop what is done
            drop = base - base % span
            del got[:drop]
            dropped += drop


def worker_actions(program: Program, frames: Iterable[int]) -> Iterator[tuple[Action, int, int]]:
    """(action, frame, n) in the order the worker runs them, n its index among its frames."""
    k, ahead = program.round_frames, program.ahead
    for i, (base, got) in enumerate(rounds(program, frames)):
        for a in program.actions:
            if 0 <= base + a.slot < len(got):
                yield a, got[base + a.slot], (i - ahead) * k + a.slot


def frames_text(frames: list[str]) -> str:
    """'0-7' for consecutive frame numbers, else the list."""
    if len(frames) > 2 and all(x.isdigit() for x in frames) and \
            [int(x) for x in frames] == list(range(int(frames[0]), int(frames[-1]) + 1)):
        return f"{frames[0]}-{frames[-1]}"
    return ", ".join(frames)


def batch_actions(program: Program, frames: list[str]) -> list[str]:
    """The lines of one full batch of a batched program over `frames` (labels)."""
    lines = []
    for pre, fire, post in batch_phases(program):
        lines += [a.text(f) for a in pre for f in frames]
        load = f" (loads {', '.join(fire.tensors)})" if fire.tensors else ""
        lines.append(f"fire phase {fire.phase} of frames {frames_text(frames)} "
                     f"(batch {program.batch}){load}")
        lines += [a.text(f) for a in post for f in frames]
    return lines


def describe(plan: Plan, rounds: int = 3) -> list[str]:
    """Lines that print each worker's program unrolled over its first `rounds` rounds: under
    static dispatch (or alone in its group) with the frames it takes, else with its own frame
    numbers (#n: the n-th frame it takes, whichever that is)."""
    lines = []
    for prog in compile_programs(plan):
        laned = f", {prog.lanes} lanes each running it" if prog.lanes > 1 else ""
        k = prog.round_frames
        order = (f", {k} frame{'s' if k > 1 else ''} a round, first phase {prog.ahead} "
                 f"round{'s' if prog.ahead != 1 else ''} ahead"
                 if prog.ahead or k > 1 else "")
        mode = "static dispatch" if prog.pattern is not None else "dynamic dispatch"
        if prog.batch > 1:
            wait = f"{prog.batch_wait * 1e3:g} ms" if prog.batch_wait else "no wait"
            order = f", batch {prog.batch} (a partial batch: {wait})"
        lines.append(f"{prog.element} (stage {prog.actor}, member {prog.member}, {mode}"
                     f"{order}{laned}):")
        count = rounds * prog.round_frames * prog.batch  # round r takes up to (r + 1) * k * b
        frames = prog.static_frames(count * (len(prog.pattern) if prog.pattern else 1))
        mine = frames[:count] if frames is not None else list(range(count))
        label = (lambda f: str(f)) if frames is not None else (lambda n: f"#{n}")
        if prog.batch > 1:  # full batches, as a saturated stream fills them
            for r in range(rounds):
                lines.append(f"  round {r}:")
                lines += [f"    {x}" for x in batch_actions(
                    prog, [label(f) for f in mine[r * prog.batch:(r + 1) * prog.batch]])]
            continue
        last_round = None
        for a, f, n in worker_actions(prog, mine):
            r = (n - a.slot) // prog.round_frames + prog.ahead  # counted from the first
            if r >= rounds:
                break
            if r != last_round:
                lines.append(f"  round {r}:")
                last_round = r
            lines.append(f"    {a.text(label(f))}")
    return lines
