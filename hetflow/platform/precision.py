"""The number format an element computes in: a property of where a layer runs, not of the layer.

One GPU may run fp16 beside a CPU core that runs fp32 in the same pipeline. A platform says
each device's and cluster's precision (YAML `precision:`, or `with_precisions` for a setting
such as 'gpu=fp16 big=int8'), and every element built from it carries that precision.

Notation: an element of another precision than fp32 is named with it, `gpu0@fp16`,
`cpu0-3@int8`, so a name stays one token beside the lanes of a design ('gpu0@fp16 x8') and in
replica groups ('cpu0@int8|cpu1@int8'). fp32 elements keep their plain names, and fp32 is left
out of every dict and hash, so profiles and plans made before precisions existed still match.

Which precisions an element kind can run is decided here, from the kind alone; whether a
particular device can (bf16 needs an Ampere or later GPU) is the backend's check at run time.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Mapping

from hetflow.errors import InputError

if TYPE_CHECKING:
    from hetflow.platform.spec import Platform

DEFAULT_PRECISION = "fp32"
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8")
# per element kind; an accelerator without a backend is only estimated, at fp32
PRECISIONS_OF_KIND = {"cpu": ("fp32", "int8"), "gpu": ("fp32", "tf32", "fp16", "bf16"),
                      "accel": ("fp32",)}
SEPARATOR = "@"
# a GPU's reduced precisions, the one to try first first: on tensor-core GPUs (Volta and later)
# fp16 and bf16 run at one rate and tf32 at half of it, so the first that stays within the
# user's tolerance is at least as fast as those after it (fp16 before bf16: more mantissa)
GPU_PREFERENCE = ("fp16", "bf16", "tf32")


def precision_problem(kind: str, precision: object) -> str | None:
    """Why an element of `kind` cannot run at `precision`, or None when it can."""
    if precision not in PRECISIONS:
        return f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})"
    allowed = PRECISIONS_OF_KIND.get(kind, (DEFAULT_PRECISION,))
    if precision not in allowed:
        return f"a {kind} element runs {' or '.join(allowed)}, not {precision}"
    return None


def element_name(base: str, precision: str) -> str:
    """'gpu0', 'fp16' -> 'gpu0@fp16'; fp32 keeps the plain name."""
    return base if precision == DEFAULT_PRECISION else f"{base}{SEPARATOR}{precision}"


def split_element_name(name: str) -> tuple[str, str]:
    """'gpu0@fp16' -> ('gpu0', 'fp16'); 'cpu0-3' -> ('cpu0-3', 'fp32')."""
    base, sep, precision = name.rpartition(SEPARATOR)
    return (base, precision) if sep and precision in PRECISIONS else (name, DEFAULT_PRECISION)


def parse_precisions(text: str, where: str = "--precision") -> dict[str, str]:
    """'gpu=fp16 big=int8' or 'gpu0=fp16,cpu=int8' -> {target: precision}. A target is a GPU
    ('gpu0'), an accelerator or a cluster by name, or a kind ('gpu', 'cpu') for all of it."""
    out: dict[str, str] = {}
    for item in text.replace(",", " ").split():
        m = re.fullmatch(r"([^=\s]+)=([^=\s]+)", item)
        if not m:
            raise InputError(f"{where}: cannot read {item!r} (write e.g. 'gpu=fp16 cpu=int8')")
        if m.group(1) in out:
            raise InputError(f"{where}: {m.group(1)!r} is given twice")
        out[m.group(1)] = m.group(2)
    return out


def with_precisions(platform: "Platform", setting: Mapping[str, str] | str,
                    where: str = "--precision") -> "Platform":
    """`platform` with the precisions of `setting` (see `parse_precisions`) on its GPUs and
    clusters; a name given wins over its kind. InputError names the target and the setting
    where a target is unknown or cannot run the precision."""
    wanted = parse_precisions(setting, where) if isinstance(setting, str) else dict(setting)
    targets = {g.element_name: "gpu" for g in platform.gpus}
    targets.update({cl.name: "cpu" for cl in platform.clusters})
    targets.update({a.name: "accel" for a in platform.accelerators})
    for target, precision in wanted.items():
        kind = targets.get(target, target if target in PRECISIONS_OF_KIND else None)
        if kind is None:
            raise InputError(f"{where}: {target}={precision}: platform {platform.name!r} has no "
                             f"GPU, cluster or accelerator {target!r} (and it is no kind: "
                             f"{', '.join(PRECISIONS_OF_KIND)})")
        problem = precision_problem(kind, precision)
        if problem:
            raise InputError(f"{where}: {target}={precision}: {problem}")

    def chosen(name: str, kind: str, current: str) -> str:
        return wanted.get(name, wanted.get(kind, current))

    return replace(
        platform,
        gpus=tuple(replace(g, precision=chosen(g.element_name, "gpu", g.precision))
                   for g in platform.gpus),
        clusters=tuple(replace(cl, precision=chosen(cl.name, "cpu", cl.precision))
                       for cl in platform.clusters))


AUTO = "auto"


def is_auto(setting: str | None) -> bool:
    """Whether a --precision setting lets the search choose among every precision."""
    return setting is not None and setting.strip() == AUTO


def precision_settings(platform: "Platform", setting: str | None,
                       where: str = "--precision") -> list[dict[str, str]]:
    """The precision settings a search may choose among: none for fp32 (the platform as it is),
    the one given (checked against the platform), or with 'auto' every combination of the
    precisions each GPU and cluster can run, so that each device runs one precision in a plan."""
    if setting is None or setting.strip() in ("", DEFAULT_PRECISION):
        return [{}]
    if not is_auto(setting):
        wanted = parse_precisions(setting, where)
        with_precisions(platform, wanted, where)  # InputError now for a target or precision
        return [wanted]
    targets = [(g.element_name, "gpu") for g in platform.gpus]
    targets += [(cl.name, "cpu") for cl in platform.clusters]
    choices = [PRECISIONS_OF_KIND[kind] for _, kind in targets]
    return [dict(zip((name for name, _ in targets), combo))
            for combo in itertools.product(*choices)]


def precision_variants(platform: "Platform", setting: str | None,
                       where: str = "--precision") -> list["Platform"]:
    """`platform` at each setting of `precision_settings` (fp32 first under 'auto')."""
    return [with_precisions(platform, s, where) if s else platform
            for s in precision_settings(platform, setting, where)]
