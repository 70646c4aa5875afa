"""The energy a plan is predicted to take per frame, from each element's idle and busy power.

A run's energy is measured per part of the machine (runtime/energy.py: a GPU's NVML counter,
the CPU packages' RAPL counters), each counter taking its whole device, idle time included. The
model reads it the same way: the parts a plan uses draw their idle watts over the whole frame
period, and each element adds, over its busy share, what its part(s) drew above idle while it
alone ran the model flat out (`ElementPower`, measured by profile/power.py; a GPU's busy power at
each lane count and batch measured, its driving core's on the CPU package beside it). Where a
part has no counter, an element's power is modelled from the platform's `power_w` (busy) and
the problem's idle share of it, and said to be so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from hetflow.errors import InputError
from hetflow.platform.spec import ProcessingElement
from hetflow.profile.lanes import parse_batch_key
from hetflow.runtime.energy import part_of

MEASURED = ("nvml", "rapl")
# a busy window whose element was busy less than this share of it is read as it was measured
# (scaling a barely busy window up to full load would multiply its noise)
MIN_BUSY_SHARE = 0.5


@dataclass(frozen=True)
class ElementPower:
    """An element's power figures. `part`: the part of the machine whose counter takes its
    energy (for a modelled element, the element itself); `idle_w`: watts of each part with
    nothing running; `busy_w`: at each (batch, lanes) measured, watts of each part while the
    element runs flat out and the rest idle; `method`: "nvml", "rapl", or "modelled (why)"."""

    part: str
    idle_w: Mapping[str, float]
    busy_w: Mapping[tuple[int, int], Mapping[str, float]]
    method: str

    def extra_w(self, batch: int, lanes: int, parts: set[str],
                rate: Callable[[int, int], float | None] | None = None) -> float:
        """Watts above idle over `parts` while the element runs flat out at `batch` and
        `lanes`: as measured there; else, given `rate` (the element's frames/s flat out at a
        (batch, lanes), to scale), linear in that rate between the points measured (a GPU
        draws for the work it does: mobilenet_v2 at b4 x8 runs 1.8x the frames of b1 x8 and
        drew 509 W on an H200, where the lane curve at batch 1 said 273); else linear in lanes
        between the counts measured at that batch (the nearest beyond them), else at batch 1."""
        def above(watts: Mapping[str, float]) -> float:
            return sum(max(0.0, w - self.idle_w[p]) for p, w in watts.items()
                       if p in parts and p in self.idle_w)

        if (batch, lanes) in self.busy_w:
            return above(self.busy_w[(batch, lanes)])
        x = rate(batch, lanes) if rate is not None else None
        if x:
            by_rate = {r: above(w) for (b, k), w in self.busy_w.items() if (r := rate(b, k))}
            if len(by_rate) >= 2:
                return _between(by_rate, x)
        at = {k: above(w) for (b, k), w in self.busy_w.items() if b == batch} or \
            {k: above(w) for (b, k), w in self.busy_w.items() if b == 1}
        if not at:
            return min((above(w) for w in self.busy_w.values()), default=0.0)
        return _between(at, lanes)


def _between(curve: Mapping[float, float], x: float) -> float:
    """`curve` at `x`: linear between its points, the nearest beyond them."""
    ks = sorted(curve)
    if x <= ks[0]:
        return curve[ks[0]]
    if x >= ks[-1]:
        return curve[ks[-1]]
    lo = max(k for k in ks if k <= x)
    hi = min(k for k in ks if k >= x)
    return curve[lo] if lo == hi else curve[lo] + (curve[hi] - curve[lo]) * (x - lo) / (hi - lo)


def modelled_power(e: ProcessingElement, idle_fraction: float, why: str) -> ElementPower | None:
    """`e`'s power from the platform's nominal `power_w` (None where it gives none): busy at
    that, idle at `idle_fraction` of it, as `hetflow run` models a part without a counter."""
    if e.power_w is None:
        return None
    return ElementPower(e.name, {e.name: idle_fraction * e.power_w},
                        {(1, 1): {e.name: e.power_w}}, f"modelled ({why})")


def measured_power(power: Mapping[str, Any], e: ProcessingElement) -> ElementPower | None:
    """`e`'s power from a profile's power table (`Profile.power`, profile/power.py), None where
    it lacks `e`'s busy windows or its part's idle one. A busy window in which the element was
    busy a share u < 1 of the time is read at full load: idle + (watts - idle) / u."""
    idle = {p: f["watts"] for p, f in power.get("idle", {}).items()
            if f.get("watts") is not None}
    part = part_of(e)
    table = power.get("busy", {}).get(e.name)
    if part not in idle or not table:
        return None
    busy: dict[tuple[int, int], dict[str, float]] = {}
    for key, entry in table.items():
        u = entry.get("busy_share") or 1.0
        u = u if u >= MIN_BUSY_SHARE else 1.0
        busy[parse_batch_key(key)] = {p: idle[p] + (f["watts"] - idle[p]) / min(u, 1.0)
                                      for p, f in entry["parts"].items()
                                      if p in idle and f.get("watts") is not None}
    if not any(part in w for w in busy.values()):
        return None
    return ElementPower(part, idle, busy, power["idle"][part]["method"])


def nominal_rise(power: Mapping[str, Any], e: ProcessingElement) -> ElementPower | None:
    """`e`'s power where its part's idle power was measured but not `e` busy (a profile cut
    short): the part's idle watts, and its `power_w` as the rise when busy; None without
    either. The part's counter takes its whole idle draw in a run, so the idle is counted as
    measured."""
    part = part_of(e)
    idle = power.get("idle", {}).get(part, {})
    if idle.get("watts") is None or e.power_w is None:
        return None
    return ElementPower(part, {part: idle["watts"]}, {(1, 1): {part: idle["watts"] + e.power_w}},
                        f"{idle['method']} idle, modelled busy ({no_counter_reason(power, e)})")


def element_powers(power: Mapping[str, Any], elements: list[ProcessingElement]
                   ) -> tuple[dict[str, ElementPower], dict[str, str]]:
    """The measured power of each element the profile's power table (`Profile.power`) has,
    and for each other element why it has none (it is then modelled from its `power_w`:
    `Problem.element_power`)."""
    figures, unmeasured = {}, {}
    for e in elements:
        figure = measured_power(power, e) or nominal_rise(power, e)
        if figure is not None:
            figures[e.name] = figure
        else:
            unmeasured[e.name] = no_counter_reason(power, e)
    return figures, unmeasured


def no_counter_reason(power: Mapping[str, Any], e: ProcessingElement) -> str:
    """Why the profile's power table has no measured figure for `e`."""
    part = part_of(e)
    missing = power.get("missing", {})
    if part in missing:
        return missing[part]
    if not power:
        return "the profile measured no power"
    if part not in power.get("idle", {}):
        return f"the profile has no idle power of {part}"
    return f"the profile has no busy power of {e.name}"


def frame_energy(figures: Mapping[str, ElementPower], utilisation: Mapping[str, float],
                 throughput: float, lanes: Mapping[str, int], batch: Mapping[str, int],
                 rates: Mapping[str, Callable[[int, int], float | None]] | None = None
                 ) -> float | None:
    """Joules per frame of a plan whose elements are busy `utilisation` of the time at
    `throughput` frames/s (None where an element has no figure or the rate is not positive):
    the idle watts of every part its elements use, over the frame period, plus each element's
    watts above idle on those parts times its busy share of the period (`rates`: an
    element's flat-out rate at a (batch, lanes), see `ElementPower.extra_w`)."""
    if not utilisation or any(e not in figures for e in utilisation):
        return None
    if not throughput > 0 or throughput == float("inf"):
        return None
    used = [figures[e] for e in utilisation]
    parts = {f.part for f in used}
    idle = {p: w for f in used for p, w in f.idle_w.items() if p in parts}
    busy = sum(u * figures[e].extra_w(batch.get(e, 1), lanes.get(e, 1), parts,
                                      (rates or {}).get(e))
               for e, u in utilisation.items())
    return (sum(idle.values()) + busy) / throughput


def energy_method(problem, elements) -> str:
    """How `problem` figures the energy of a plan on `elements`: their methods, each once."""
    return ", ".join(dict.fromkeys(f.method for e in dict.fromkeys(elements)
                                   if (f := problem.element_power(e)) is not None))


def no_power_line(name: str, why: str) -> str:
    """The line naming an element that has no power figure at all."""
    return (f"element {name} has no power figure: no energy counter ({why}) and its platform "
            "gives it no power_w (give it power_w in the platform YAML, or profile where its "
            "counter can be read)")


def require_power(problem, elements: list[str] | None = None) -> None:
    """InputError naming the first element of `problem` (or of `elements`) without a power
    figure (`Problem.element_power`), and why."""
    for name in elements or [e.name for e in problem.elements]:
        if problem.element_power(name) is None:
            raise InputError(no_power_line(name, problem.power_unmeasured.get(
                name, "none was read")))
