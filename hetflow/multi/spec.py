"""Application specs of a multi-application problem: `MODEL:period=20ms:priority=1[:...]`.

Each application is one CNN fed at a fixed period; its deadline is its period (Kang et al.,
Section VI). A lower priority number is a higher priority (the paper's convention). Optional
keys: `profile=PATH` (this model's profile, instead of looking in --profile-dir) and `name=`
(how reports call it; default the model file's stem or zoo name).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hetflow.errors import InputError

_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
_KEYS = ("period", "priority", "profile", "name")


@dataclass(frozen=True)
class AppSpec:
    model: str  # ONNX path or zoo name
    period: float  # seconds; also the deadline
    priority: int  # lower number = higher priority
    name: str
    profile: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def parse_period(text: str, where: str = "period") -> float:
    """'20ms' -> 0.02; units s, ms, us; a bare number is refused (20 what?)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(s|ms|us)\s*", text)
    if not m:
        if re.fullmatch(r"\s*-\s*[0-9.]+\s*(s|ms|us)?\s*", text):
            raise InputError(f"{where}={text}: a period must be positive")
        raise InputError(f"{where}={text!r}: expected a duration with a unit, e.g. 20ms, 0.5s, "
                         "800us")
    value = float(m.group(1)) * _UNITS[m.group(2)]
    if value <= 0:
        raise InputError(f"{where}={text}: a period must be positive")
    return value


def parse_app_spec(text: str, position: int = 1) -> AppSpec:
    """Parse one `MODEL:key=value:...` argument; `position` (1-based) is the default priority."""
    model, *parts = text.split(":")
    if not model:
        raise InputError(f"application {text!r}: no model before the first ':'")
    opts: dict[str, str] = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not value:
            raise InputError(f"application {text!r}: {part!r} is not key=value "
                             f"(keys: {', '.join(_KEYS)})")
        if key not in _KEYS:
            raise InputError(f"application {text!r}: unknown key {key!r} (keys: {', '.join(_KEYS)})")
        if key in opts:
            raise InputError(f"application {text!r}: {key} given twice")
        opts[key] = value
    if "period" not in opts:
        raise InputError(f"application {text!r}: no period (add e.g. :period=20ms)")
    period = parse_period(opts["period"], f"{model}: period")
    try:
        priority = int(opts.get("priority", position))
    except ValueError:
        raise InputError(f"application {text!r}: priority={opts['priority']!r} is not an "
                         "integer") from None
    name = opts.get("name") or Path(model).stem
    return AppSpec(model, period, priority, name, opts.get("profile"))


def check_specs(specs: list[AppSpec]) -> None:
    """One-line errors for a model given twice, a name used twice, or a priority clash."""
    if not specs:
        raise InputError("no applications given (e.g. A.onnx:period=20ms:priority=1)")
    seen_model: dict[str, str] = {}
    seen_name: dict[str, str] = {}
    seen_prio: dict[int, str] = {}
    for s in specs:
        key = str(Path(s.model).resolve()) if Path(s.model).exists() else s.model
        if key in seen_model:
            raise InputError(f"model {s.model} is given twice (applications {seen_model[key]} "
                             f"and {s.name})")
        if s.name in seen_name:
            raise InputError(f"two applications are named {s.name!r} (models {seen_name[s.name]} "
                             f"and {s.model}); give one a :name=")
        if s.priority in seen_prio:
            raise InputError(f"priority clash: applications {seen_prio[s.priority]} and {s.name} "
                             f"both have priority {s.priority}")
        seen_model[key], seen_name[s.name], seen_prio[s.priority] = s.name, s.model, s.name


def parse_app_specs(texts: list[str]) -> list[AppSpec]:
    specs = [parse_app_spec(t, i + 1) for i, t in enumerate(texts)]
    check_specs(specs)
    return specs


def by_priority(specs):
    """Highest priority (lowest number) first; works on anything with a `priority`."""
    return sorted(specs, key=lambda s: s.priority)
