"""The plan file: mapping + CSDF application + predicted metrics; what `hetflow run` executes."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetflow.dataflow.csdf import CsdfApp
from hetflow.errors import InputError
from hetflow.model.split import LayerSplit
from hetflow.platform.precision import element_name, split_element_name
from hetflow.platform.spec import ProcessingElement

from hetflow.plan.orders import check_interleave
from hetflow.plan.mapping import Mapping, group_members
from typing import Mapping as Mapping_
from hetflow.io import write_json
from hetflow.schema import validate

PLAN_VERSION = 2  # plan_schema.PlanFile describes it; 2 added batches (Mapping.batch)
PLAN_VERSIONS = (1, 2)  # versions that load: a version 1 plan has no batches (b = 1)


def _check_agree(source: str, name_a: str, a: dict[str, str], name_b: str,
                 b: dict[str, str]) -> None:
    """InputError naming the first layer two layer -> actor maps place differently."""
    for layer in sorted(a.keys() | b.keys()):
        if a.get(layer) != b.get(layer):
            on = lambda m: repr(m[layer]) if layer in m else "unmapped"  # noqa: E731
            raise InputError(
                f"{source}: {name_a} and {name_b} disagree (layer {layer!r}: {on(a)} vs "
                f"{on(b)}; "
                f"{sum(a.get(k) != b.get(k) for k in a.keys() | b.keys())} layer(s) differ); "
                "was the plan edited? Run `hetflow map` again to make a consistent plan")


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
    # layers computed as several parts (hetflow.model.split), applied to the model on load
    splits: list[LayerSplit] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"version": PLAN_VERSION, "model_name": self.model_name,
                "model_hash": self.model_hash, "model_source": self.model_source,
                "platform_name": self.platform_name, "strategy": self.strategy,
                "search": self.search, "fuse": self.fuse, "input_shapes": self.input_shapes,
                "capacity_frames": self.capacity_frames, "predicted": self.predicted,
                "elements": {k: v.to_dict() for k, v in self.elements.items()},
                "mapping": self.mapping.to_dict(), "app": self.app.to_dict(),
                **({"splits": [x.to_dict() for x in self.splits]} if self.splits else {})}

    @staticmethod
    def from_dict(d: Any, source: str = "plan") -> "Plan":

        from hetflow.plan.schema import PlanFile

        return Plan.from_file(validate(PlanFile, d, source, "hetflow plan"), source)

    @staticmethod
    def from_file(f: Any, source: str = "plan") -> "Plan":
        """The Plan of a validated plan_schema.PlanFile, once its meaning is checked too."""
        plan = Plan(f.model_name, f.model_hash, f.model_source, f.platform_name,
                    Mapping(**f.mapping.model_dump()), CsdfApp.from_dict(f.app.model_dump()),
                    {k: ProcessingElement.from_dict(v.model_dump(exclude_defaults=True))
                     for k, v in f.elements.items()},
                    f.capacity_frames, f.predicted, f.strategy, f.search, f.fuse,
                    f.input_shapes,
                    [LayerSplit.from_dict(x.model_dump(), f"{source}: splits")
                     for x in f.splits])
        plan.check(source)
        return plan

    def check(self, source: str = "plan") -> None:
        """Refuse a plan that is not what `hetflow map` wrote, as a hand edit leaves it: the
        runtime executes `app`, so a `mapping` that says otherwise would silently not be run.
        (The file's shape and types are the schema's job: plan_schema.PlanFile.)"""
        m, app = self.mapping, self.app
        # each layer runs once: in one phase, once (phase_of keeps only one place of each)
        placed: dict[str, str] = {}
        for actor, phases in app.phases.items():
            for p in phases:
                for layer in p.layers:
                    where = f"actor {actor!r} phase {p.index}"
                    if layer in placed:
                        raise InputError(f"{source}: layer {layer!r} is in app.phases twice "
                                         f"({placed[layer]} and {where}); a layer runs once: "
                                         "run `hetflow map` again")
                    placed[layer] = where
        _check_agree(source, "mapping.assignment", m.assignment, "app.assignment",
                     app.assignment)
        # the layers that run: each in a phase of the actor its assignment names
        phase_actor = {layer: actor for layer, (actor, _) in app.phase_of().items()}
        _check_agree(source, "app.assignment", app.assignment, "app.phases", phase_actor)
        if not app.model_inputs or not app.model_outputs:
            raise InputError(f"{source}: app.model_inputs and app.model_outputs must name the "
                             "model's inputs and outputs; run `hetflow map` again")
        # each tensor the app hands on is made and read by the phases that say so: a channel
        # from its source phase's outputs to its destination phase's inputs, a model input
        # read by its actors, a model output made by its actor
        uses = [(f"app.channels {c.name!r}", c.tensor, c.src, c.src_phase, "outputs")
                for c in app.channels]
        uses += [(f"app.channels {c.name!r}", c.tensor, c.dst, c.dst_phase, "inputs")
                 for c in app.channels]
        uses += [(f"app.model_inputs {t!r}", t, a, None, "inputs")
                 for t, actors in app.model_inputs.items() for a in actors]
        uses += [(f"app.model_outputs {t!r}", t, a, None, "outputs")
                 for t, a in app.model_outputs.items()]
        for where, tensor, actor, index, side in uses:
            phases = app.phases.get(actor, [])
            if index is not None and index >= len(phases):
                raise InputError(f"{source}: {where} names phase {index} of actor {actor!r}, "
                                 f"which app.phases does not have; run `hetflow map` again")
            if not any(tensor in getattr(p, side) for p in
                       (phases if index is None else [phases[index]])):
                raise InputError(f"{source}: {where}: tensor {tensor!r} is not among the "
                                 f"{side} of actor {actor!r}"
                                 + (f" phase {index}" if index is not None else "")
                                 + " in app.phases; run `hetflow map` again")
        check_interleave(m, app, source)
        check_plan_batch(m, source)
        for actor in [*m.actors, *app.actors, *m.dispatch]:
            for e in group_members(actor):
                if e not in self.elements:
                    raise InputError(f"{source}: element {e!r} (of actor {actor!r}) is not among "
                                     f"the plan's elements ({', '.join(self.elements) or 'none'})")
        check_element_precisions(self.elements, source)

    def check_covers(self, layers: list[str], source: str = "plan") -> None:
        """Refuse a plan whose phases leave out a layer of its model (`layers`, in model
        order) or name one the model does not have, naming the first such layer."""
        placed = set(self.app.phase_of())
        missing = [name for name in layers if name not in placed]
        if missing:
            raise InputError(f"{source}: layer {missing[0]!r} of model {self.model_name} is in "
                             f"no phase of app.phases ({len(missing)} layer(s) left out); run "
                             "`hetflow map` again")
        extra = sorted(placed - set(layers))
        if extra:
            raise InputError(f"{source}: app.phases names layer {extra[0]!r}, which model "
                             f"{self.model_name} does not have; run `hetflow map` again")

    def save(self, path: str | Path) -> Path:

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


def check_element_precisions(elements: Mapping_[str, ProcessingElement], source: str) -> None:
    """InputError naming the element where its name and its precision disagree ('gpu0@fp16'
    is the fp16 element of gpu0; plain 'gpu0' is fp32), as a hand edit of one leaves them."""
    for key, e in elements.items():
        base, named = split_element_name(key)
        if named != e.precision:
            raise InputError(f"{source}: element {key!r} has precision {e.precision}, which "
                             f"names it {element_name(base, e.precision)!r}; give the "
                             f"precision its name says ({named}) or map again")


def check_plan_lanes(mapping: Mapping, elements: Mapping_[str, ProcessingElement]) -> None:
    """InputError naming the element for lanes on an element that is not a GPU, a lane count
    below 1, or lanes on an element the mapping does not use."""
    used = set(mapping.elements)
    for e, k in mapping.lanes.items():
        if e not in used or e not in elements:
            raise InputError(f"lanes are given for element {e!r}, which the mapping does not use")
        if elements[e].kind != "gpu":
            raise InputError(f"element {e!r} is a {elements[e].kind} element: only GPU elements "
                             f"run lanes (asked for {k})")
        if not isinstance(k, int) or k < 1:
            raise InputError(f"element {e!r}: lanes must be a whole number >= 1 (got {k!r})")


def check_plan_batch(mapping: Mapping, source: str = "plan") -> None:
    """InputError naming the element for a batch below 1 or not whole, a negative or
    non-finite batch wait, or a batch on an element the mapping does not use. (Whether the
    profile measured that batch is the cost model's check: mapping.problem.check_batch.)"""
    used = set(mapping.elements)
    for e, b in mapping.batch.items():
        if e not in used:
            raise InputError(f"{source}: batch is given for element {e!r}, which the mapping "
                             "does not use")
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise InputError(f"{source}: element {e!r}: batch must be a whole number >= 1 "
                             f"(got {b!r})")
        if b > 1 and (mapping.round_frames > 1
                      or any(e in group_members(a) for a in mapping.interleave)):
            raise InputError(f"{source}: element {e!r}: batch {b} on an interleaved actor (its "
                             "phases fire frame by frame); give it batch 1 or no interleave")
    for e, w in mapping.batch_wait.items():
        if e not in used:
            raise InputError(f"{source}: batch_wait is given for element {e!r}, which the "
                             "mapping does not use")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) \
                or w < 0:
            raise InputError(f"{source}: element {e!r}: batch_wait must be seconds >= 0 "
                             f"(got {w!r})")
