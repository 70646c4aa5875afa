"""A mapping: which actor runs each layer, and which processing elements each actor runs on.

An actor is one element, or a *replica group* of elements that take frames in turn (stage
replication, DESIGN.md): actor 'cpu0|cpu1' runs its phases on cpu0 for even frames and on cpu1
for odd ones. A group of elements of different speeds takes frames by a weighted cyclic
*dispatch pattern* (a CSDF distributor with cyclic rates): pattern [0, 0, 0, 1] sends three
frames of every four to the first member and one to the second.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GROUP_SEP = "|"


def group_name(elements: list[str] | tuple[str, ...]) -> str:
    return GROUP_SEP.join(elements)


def group_members(actor: str) -> tuple[str, ...]:
    return tuple(actor.split(GROUP_SEP))


def describe_design(actors, lanes: dict[str, int] | None = None) -> str:
    """The one notation for a design, used by every command and report: its stages (actors) in
    firing order joined by ' + '; a stage on several elements that take frames in turn is
    'a|b'; an element of several cores is named by them ('cpu0-3'); a GPU running k frames at
    once is 'gpu0 x8'."""
    lanes = lanes or {}
    return " + ".join(GROUP_SEP.join(e + (f" x{lanes[e]}" if lanes.get(e, 1) > 1 else "")
                                     for e in group_members(a)) for a in actors)


@dataclass
class Mapping:
    assignment: dict[str, str]  # layer -> actor (element name or 'a|b' replica group)
    policy: str = "maximal"  # phase policy for Algorithm 2
    meta: dict[str, Any] = field(default_factory=dict)
    dispatch: dict[str, list[int]] = field(default_factory=dict)  # actor -> member pattern
    # how the runtime hands frames to a group's members: "dynamic" (the next frame to whichever
    # member is free; the patterns then only give the analysis its shares) or "static" (by the
    # patterns, a pure CSDF distributor)
    dispatch_mode: str = "dynamic"
    lanes: dict[str, int] = field(default_factory=dict)  # GPU element -> frames in flight (1)
    # actor -> frame offset per phase (orders.Firing): in round r the actor fires phase p of
    # frame r + offset[p], so a processor whose frame leaves between two phases runs the early
    # phases of later frames meanwhile; offsets never increase and the last is 0. None: frame
    # by frame
    interleave: dict[str, list[int]] = field(default_factory=dict)
    # frames each round of the interleaved actors covers: round i fires phase p of frames
    # (i + offset[p]) * round_frames + j for j < round_frames, so with 2 a phase of the next
    # frame runs while the frame before is away, and few frames are in flight
    round_frames: int = 1
    batch: dict[str, int] = field(default_factory=dict)  # element -> frames a firing takes (1)
    # element -> seconds a partial batch waits for more frames from its first frame's arrival
    # (0: fire whatever is waiting as soon as a lane is free)
    batch_wait: dict[str, float] = field(default_factory=dict)

    def lanes_of(self, element: str) -> int:
        return self.lanes.get(element, 1)

    def batch_of(self, element: str) -> int:
        return self.batch.get(element, 1)

    def workers(self, actor: str) -> int:
        """Frames `actor` works on at once: its members' lanes (a CPU member has one)."""
        return sum(self.lanes_of(e) for e in group_members(actor))

    def pattern(self, actor: str) -> list[int]:
        """Member index per frame, cyclically; round-robin unless a pattern was given."""
        return self.dispatch.get(actor) or list(range(len(group_members(actor))))

    @property
    def actors(self) -> list[str]:
        return list(dict.fromkeys(self.assignment.values()))

    @property
    def elements(self) -> list[str]:
        return [e for a in self.actors for e in group_members(a)]

    def key(self) -> tuple:
        """Equal for mappings that run alike: a pattern spelled out as the round-robin default
        is the default (the single strategy made such twins, and the bench piloted both)."""
        groups = sorted(a for a in self.actors if len(group_members(a)) > 1)
        return (tuple(sorted(self.assignment.items())), self.policy, self.dispatch_mode,
                tuple((a, tuple(self.pattern(a))) for a in groups),
                tuple(sorted((e, k) for e, k in self.lanes.items() if k != 1)),
                tuple(sorted((a, tuple(o)) for a, o in self.interleave.items()
                             if any(o) or self.round_frames > 1)), self.round_frames)

    def to_dict(self) -> dict[str, Any]:
        return {"assignment": self.assignment, "policy": self.policy, "meta": self.meta,
                "dispatch": self.dispatch, "dispatch_mode": self.dispatch_mode,
                "lanes": self.lanes,
                **({"interleave": self.interleave} if self.interleave else {}),
                **({"round_frames": self.round_frames} if self.round_frames != 1 else {})}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Mapping":
        return Mapping(dict(d["assignment"]), d.get("policy", "maximal"), d.get("meta", {}),
                       {k: [int(x) for x in v] for k, v in d.get("dispatch", {}).items()},
                       d.get("dispatch_mode", "dynamic"),
                       {k: int(v) for k, v in d.get("lanes", {}).items()},
                       {k: [int(x) for x in v] for k, v in d.get("interleave", {}).items()},
                       int(d.get("round_frames", 1)))


def weighted_pattern(times: list[float], max_len: int = 64) -> list[int]:
    """A cyclic dispatch pattern giving member m a share of frames proportional to 1/times[m],
    at most `max_len` long, members interleaved (smooth weighted round-robin) so a slow member
    never receives two frames back to back when a faster one is free."""
    rates = [1.0 / t for t in times]
    total = sum(rates)
    best = None
    for length in range(len(times), max_len + 1):
        counts = [max(1, round(length * r / total)) for r in rates]
        # throughput of the group with these counts, relative to the ideal sum of rates
        thr = min(sum(counts) * r / c for r, c in zip(rates, counts)) / total
        if best is None or thr > best[0] + 1e-9:
            best = (thr, counts)
        if thr > 0.995:
            break
    counts = best[1]
    pattern, credit = [], [0.0] * len(counts)
    for _ in range(sum(counts)):
        for m, c in enumerate(counts):
            credit[m] += c
        m = max(range(len(counts)), key=lambda i: credit[i])
        credit[m] -= sum(counts)
        pattern.append(m)
    return pattern
