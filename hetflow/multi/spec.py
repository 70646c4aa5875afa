"""Application specs of a multi-application problem: `MODEL:period=20ms:priority=1[:...]`.

Each application is one CNN fed at a fixed period. A lower priority number is a higher priority
(the paper's convention). Optional keys:
- `deadline=` how long after its release a frame must be done (default the period; shorter or
  longer than the period: with a longer one, several frames of a stream are in flight);
- `streams=N` N streams of the model at this period and deadline (cameras), one application of
  N streams at one priority level, served first come first served among themselves; reports
  call its streams NAME/0 .. NAME/N-1;
- `profile=PATH` (this model's profile, instead of looking in --profile-dir);
- `name=` (how reports call it; default the model file's stem or zoo name).
The same model may be given many times under distinct names (`resnet18:...:name=cam7`); its
profile is loaded once.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hetflow.errors import InputError

_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
_KEYS = ("period", "deadline", "streams", "priority", "profile", "name")


@dataclass(frozen=True)
class AppSpec:
    model: str  # ONNX path or zoo name
    period: float  # seconds between the releases of each stream
    priority: int  # lower number = higher priority
    name: str
    profile: str | None = None
    deadline: float | None = None  # s after a release; None: the period
    streams: int = 1  # streams of this model at this period, one priority level

    @property
    def relative_deadline(self) -> float:
        return self.period if self.deadline is None else self.deadline

    def stream_names(self) -> list[str]:
        """How reports call each stream: the name, or NAME/0 .. NAME/N-1 for several."""
        if self.streams == 1:
            return [self.name]
        return [f"{self.name}/{i}" for i in range(self.streams)]

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def parse_period(text: str, where: str = "period") -> float:
    """'20ms' -> 0.02; units s, ms, us; a bare number is refused (20 what?)."""
    setting = where.rsplit(" ", 1)[-1]
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(s|ms|us)\s*", text)
    if not m:
        if re.fullmatch(r"\s*-\s*[0-9.]+\s*(s|ms|us)?\s*", text):
            raise InputError(f"{where}={text}: a {setting} must be positive")
        raise InputError(f"{where}={text!r}: expected a duration with a unit, e.g. 20ms, 0.5s, "
                         "800us")
    value = float(m.group(1)) * _UNITS[m.group(2)]
    if value <= 0:
        raise InputError(f"{where}={text}: a {setting} must be positive")
    return value


def _integer(text: str, opts: dict[str, str], key: str) -> int:
    try:
        return int(opts[key])
    except ValueError:
        raise InputError(f"application {text!r}: {key}={opts[key]!r} is not an integer") from None


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
    name = opts.get("name") or Path(model).stem
    period = parse_period(opts["period"], f"application {name}: period")
    deadline = (parse_period(opts["deadline"], f"application {name}: deadline")
                if "deadline" in opts else None)
    priority = _integer(text, opts, "priority") if "priority" in opts else position
    streams = _integer(text, opts, "streams") if "streams" in opts else 1
    if streams < 1:
        raise InputError(f"application {name}: streams={streams}: give at least 1 stream")
    if "/" in name:
        raise InputError(f"application {text!r}: name={name!r}: '/' is kept for stream names "
                         "(NAME/0, NAME/1, ...)")
    return AppSpec(model, period, priority, name, opts.get("profile"), deadline, streams)


def check_specs(specs: list[AppSpec]) -> None:
    """One-line errors for a name used twice or a priority clash. A model may be given many
    times (streams of one camera model), under distinct names."""
    if not specs:
        raise InputError("no applications given (e.g. A.onnx:period=20ms:priority=1)")
    seen_name: dict[str, str] = {}
    seen_prio: dict[int, str] = {}
    for s in specs:
        if s.name in seen_name:
            raise InputError(f"two applications are named {s.name!r} (models {seen_name[s.name]} "
                             f"and {s.model}); give one a :name=")
        if s.priority in seen_prio:
            raise InputError(f"priority clash: applications {seen_prio[s.priority]} and {s.name} "
                             f"both have priority {s.priority} (streams of one model at one "
                             "priority: give them as one application with :streams=N)")
        seen_name[s.name], seen_prio[s.priority] = s.model, s.name


def parse_app_specs(texts: list[str]) -> list[AppSpec]:
    specs = [parse_app_spec(t, i + 1) for i, t in enumerate(texts)]
    check_specs(specs)
    return specs


def by_priority(specs):
    """Highest priority (lowest number) first; works on anything with a `priority`."""
    return sorted(specs, key=lambda s: s.priority)
