"""A mapping: which actor runs each layer, and which processing elements each actor runs on.

An actor is one element, or a *replica group* of identical elements that take frames in turn
(stage replication, DESIGN.md): actor 'cpu0|cpu1' runs its phases on cpu0 for even frames and on
cpu1 for odd ones. Analysis models a group of k as an actor with concurrency k.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GROUP_SEP = "|"


def group_name(elements: list[str] | tuple[str, ...]) -> str:
    return GROUP_SEP.join(elements)


def group_members(actor: str) -> tuple[str, ...]:
    return tuple(actor.split(GROUP_SEP))


@dataclass
class Mapping:
    assignment: dict[str, str]  # layer -> actor (element name or 'a|b' replica group)
    policy: str = "maximal"  # phase policy for Algorithm 2
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def actors(self) -> list[str]:
        return list(dict.fromkeys(self.assignment.values()))

    @property
    def elements(self) -> list[str]:
        return [e for a in self.actors for e in group_members(a)]

    def key(self) -> tuple:
        return tuple(sorted(self.assignment.items())), self.policy

    def to_dict(self) -> dict[str, Any]:
        return {"assignment": self.assignment, "policy": self.policy, "meta": self.meta}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Mapping":
        return Mapping(dict(d["assignment"]), d.get("policy", "maximal"), d.get("meta", {}))
