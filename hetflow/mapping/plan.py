"""The plan file: mapping + CSDF application + predicted metrics; what `hetflow run` executes."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetflow.dataflow.csdf import CsdfApp
from hetflow.errors import InputError
from hetflow.platform.spec import ProcessingElement

from .mapping import Mapping

PLAN_VERSION = 1


@dataclass
class Plan:
    model_name: str
    model_hash: str
    model_source: str
    platform_name: str
    mapping: Mapping
    app: CsdfApp
    elements: dict[str, ProcessingElement]  # every element an actor runs on
    capacity_frames: int
    predicted: dict[str, Any]  # Metrics.to_dict()
    strategy: str
    search: dict[str, Any] = field(default_factory=dict)  # seed, seconds, evaluations, space size
    fuse: bool = False
    input_shapes: dict[str, list[int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"version": PLAN_VERSION, "model_name": self.model_name,
                "model_hash": self.model_hash, "model_source": self.model_source,
                "platform_name": self.platform_name, "strategy": self.strategy,
                "search": self.search, "fuse": self.fuse, "input_shapes": self.input_shapes,
                "capacity_frames": self.capacity_frames, "predicted": self.predicted,
                "elements": {k: v.to_dict() for k, v in self.elements.items()},
                "mapping": self.mapping.to_dict(), "app": self.app.to_dict()}

    @staticmethod
    def from_dict(d: dict[str, Any], source: str = "plan") -> "Plan":
        if d.get("version") != PLAN_VERSION:
            raise InputError(f"{source}: plan version {d.get('version')!r} is not supported "
                             f"(this hetflow reads version {PLAN_VERSION})")
        try:
            return Plan(d["model_name"], d["model_hash"], d.get("model_source", ""),
                        d["platform_name"], Mapping.from_dict(d["mapping"]),
                        CsdfApp.from_dict(d["app"]),
                        {k: ProcessingElement.from_dict(v) for k, v in d["elements"].items()},
                        int(d["capacity_frames"]), d["predicted"], d["strategy"],
                        d.get("search", {}), bool(d.get("fuse", False)),
                        d.get("input_shapes", {}))
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{source}: not a valid hetflow plan ({type(e).__name__}: {e})") from None

    def save(self, path: str | Path) -> Path:
        from hetflow.cli.common import write_json

        return write_json(path, self.to_dict())

    @staticmethod
    def load(path: str | Path) -> "Plan":
        path = Path(path)
        if not path.exists():
            raise InputError(f"{path}: no such plan file")
        try:
            d = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InputError(f"{path}: not a JSON plan file ({e})") from None
        return Plan.from_dict(d, str(path))
