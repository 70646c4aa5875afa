"""How far a run's outputs are from the fp32 reference, frame by frame: plain numbers, no hardware.

A run at another precision (fp16 on a GPU, int8 on a CPU) is not expected to match fp32 to a
few ulps, as `hetflow.runtime.check` demands of fp32 plans; it is expected to stay close
enough. Per output tensor and frame:

- relative L2 error ||got - ref|| / ||ref|| (the usual figure for a whole tensor: one outlier
  element does not dominate it, a uniformly small drift does not vanish in it);
- max abs error (the figure the fp32 check bounds);
- top-1 agreement for classifier-shaped outputs (one axis left once the axes of size 1 are
  dropped, as a 1x1000 or 1x1000x1x1 score tensor): whether argmax is the same.

Over N frames, a report keeps the worst and the median of each deviation and the share of
frames whose top-1 agrees, and passes or fails each output against a `Tolerance`. All in
float64, so fp16 outputs can be compared without overflow. A deviation that is not finite (a
NaN in the run, a non-zero output where the reference is all zeros) fails, and is written as
null: reports are strict JSON.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

import numpy as np

from hetflow.errors import InputError

Frame = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class Tolerance:
    """What a run may deviate from the reference by, per output, over all frames.

    `rel_l2`: the worst relative L2 error allowed. `top1_flips`: the share of frames (0..1)
    whose top-1 class may differ, for classifier-shaped outputs. `max_abs`: the worst absolute
    error allowed, None for no limit (its scale depends on the model's output)."""

    rel_l2: float = 0.05
    top1_flips: float = 0.0
    max_abs: float | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None and f.name == "max_abs":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
                raise InputError(f"tolerance {f.name}: expected a number, got {v!r}")
            if v < 0:
                raise InputError(f"tolerance {f.name}: {v} is below zero")
        if self.top1_flips > 1:
            raise InputError(f"tolerance top1_flips: {self.top1_flips} is a share of frames, "
                             "at most 1")

    @staticmethod
    def parse(text: str, where: str = "--tolerance") -> "Tolerance":
        """'rel_l2=0.02,top1_flips=0.05 max_abs=0.5' -> Tolerance (unnamed settings default)."""
        known = {f.name for f in fields(Tolerance)}
        values: dict[str, float] = {}
        for item in text.replace(",", " ").split():
            m = re.fullmatch(r"(\w+)=(.+)", item)
            if not m or m.group(1) not in known:
                raise InputError(f"{where}: cannot read {item!r} (settings: "
                                 f"{', '.join(sorted(known))}; write e.g. 'rel_l2=0.02')")
            try:
                values[m.group(1)] = float(m.group(2))
            except ValueError:
                raise InputError(f"{where}: {m.group(1)}: {m.group(2)!r} is not a number"
                                 ) from None
        try:
            return Tolerance(**values)
        except InputError as e:
            raise InputError(f"{where}: {e}") from None

    def to_dict(self) -> dict[str, float | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class FrameDeviation:
    """One output of one frame against its reference."""

    rel_l2: float
    max_abs: float
    top1_agrees: bool | None  # None: not a classifier-shaped output


def is_classifier_shaped(shape: Sequence[int]) -> bool:
    """One axis of two or more entries once the axes of size 1 are dropped (1x1000, 1000x1x1)."""
    return sum(1 for d in shape if d != 1) == 1 and max(shape) >= 2


def frame_deviation(got: np.ndarray, ref: np.ndarray) -> FrameDeviation:
    """How far `got` is from `ref` (same shape; any float dtype)."""
    g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if g.shape != r.shape:
        raise ValueError(f"output of shape {g.shape} compared with a reference of {r.shape}")
    diff = np.linalg.norm((g - r).ravel())
    norm = np.linalg.norm(r.ravel())
    if norm > 0:
        rel = float(diff / norm)
    else:  # an all-zero reference: only an all-zero output is no deviation
        rel = 0.0 if diff == 0 else math.inf
    max_abs = float(np.max(np.abs(g - r))) if g.size else 0.0
    top1 = bool(np.argmax(g) == np.argmax(r)) if is_classifier_shaped(r.shape) else None
    return FrameDeviation(rel, max_abs, top1)


@dataclass(frozen=True)
class OutputDeviation:
    """One output over all frames, judged against a tolerance."""

    name: str
    frames: int
    rel_l2_worst: float
    rel_l2_median: float
    max_abs_worst: float
    max_abs_median: float
    top1_agreement: float | None  # share of frames whose top-1 agrees; None: not a classifier
    failures: tuple[str, ...]  # the limits exceeded, e.g. 'rel_l2 0.12 > 0.05'

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: _finite_or_none(getattr(self, f.name)) for f in fields(self)}
        d["failures"] = list(self.failures)
        d["passed"] = self.passed
        return d


def _finite_or_none(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def summarise(name: str, deviations: Sequence[FrameDeviation],
              tolerance: Tolerance) -> OutputDeviation:
    """The worst and median deviations of one output over its frames, and what failed."""
    if not deviations:
        raise ValueError(f"output {name!r}: no frames to compare")
    rel = np.array([d.rel_l2 for d in deviations])
    mabs = np.array([d.max_abs for d in deviations])
    agree = [d.top1_agrees for d in deviations if d.top1_agrees is not None]
    agreement = sum(agree) / len(agree) if agree else None
    # nan-aware: a NaN deviation is the worst there is, not one that compares false
    worst_rel = math.inf if np.isnan(rel).any() else float(rel.max())
    worst_abs = math.inf if np.isnan(mabs).any() else float(mabs.max())
    return OutputDeviation(name, len(deviations), worst_rel, float(np.median(rel)), worst_abs,
                           float(np.median(mabs)), agreement,
                           limits_exceeded(worst_rel, worst_abs, agreement, tolerance))


def limits_exceeded(worst_rel: float | None, worst_abs: float | None, agreement: float | None,
                    tolerance: Tolerance) -> tuple[str, ...]:
    """The limits of `tolerance` that an output's worst deviations exceed ('rel_l2 0.12 >
    0.05'); a deviation given as None (not finite, as reports write it) exceeds every limit."""
    rel = math.inf if worst_rel is None else worst_rel
    mabs = math.inf if worst_abs is None else worst_abs
    failures = []
    if not rel <= tolerance.rel_l2:
        failures.append(f"rel_l2 {rel:.3g} > {tolerance.rel_l2:g}")
    if tolerance.max_abs is not None and not mabs <= tolerance.max_abs:
        failures.append(f"max_abs {mabs:.3g} > {tolerance.max_abs:g}")
    if agreement is not None and 1 - agreement > tolerance.top1_flips + 1e-12:
        failures.append(f"top1 flips {1 - agreement:.3g} > {tolerance.top1_flips:g}")
    return tuple(failures)


def report_failures(report: Mapping[str, Any], tolerance: Tolerance) -> list[str]:
    """The limits of `tolerance` a recorded `AccuracyReport.to_dict()` exceeds, per output
    ('logits: rel_l2 0.12 > 0.05'): a deviation measured once, judged against another
    tolerance."""
    return [f"{o['name']}: {f}" for o in report["outputs"]
            for f in limits_exceeded(o["rel_l2_worst"], o["max_abs_worst"],
                                     o["top1_agreement"], tolerance)]


@dataclass(frozen=True)
class AccuracyReport:
    """A run's outputs against the reference over N frames: one entry per output."""

    label: str  # what ran, e.g. 'resnet18 on cpu0@int8'
    tolerance: Tolerance
    outputs: tuple[OutputDeviation, ...]

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)

    @property
    def frames(self) -> int:
        return min((o.frames for o in self.outputs), default=0)

    def to_dict(self) -> dict[str, Any]:
        """Strict JSON (no NaN or infinity: a deviation that is not finite is null)."""
        return {"label": self.label, "passed": self.passed, "frames": self.frames,
                "tolerance": self.tolerance.to_dict(),
                "outputs": [o.to_dict() for o in self.outputs]}


def compare_runs(got: Sequence[Frame], reference: Sequence[Frame],
                 tolerance: Tolerance | None = None, label: str = "") -> AccuracyReport:
    """Frame i of `got` against frame i of `reference`, output by output (the reference's
    outputs; `got` must have each of them)."""
    tolerance = tolerance or Tolerance()
    if len(got) != len(reference):
        raise ValueError(f"{len(got)} frames compared with {len(reference)} reference frames")
    if not reference:
        raise ValueError("no frames to compare")
    names = list(reference[0])
    per_output: dict[str, list[FrameDeviation]] = {n: [] for n in names}
    for i, (g, r) in enumerate(zip(got, reference)):
        for n in names:
            if n not in g:
                raise ValueError(f"frame {i}: output {n!r} is missing (got {sorted(g)})")
            per_output[n].append(frame_deviation(g[n], r[n]))
    return AccuracyReport(label, tolerance,
                          tuple(summarise(n, per_output[n], tolerance) for n in names))
