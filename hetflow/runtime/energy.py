"""A run's energy over its steady window: measured where this machine has a counter for an
element (NVML for a GPU, RAPL for the CPU packages), modelled from the platform's nominal
watts where it has none, and the method named beside every figure.

The parts are the GPUs, one each ("gpu0"), the CPU elements together ("cpu": a package counter
cannot tell its cores apart) and each other element by name. A counter measures its whole
device, idle time and other processes included; the model counts an element's busy share of
the run times its `power_w`, as the mapping's energy objective does.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from hetflow.backends.energy import (POWERCAP, EnergyMeter, EnergySampler, WindowEnergy,
                                     finite_or_none, nvml_meters, rapl_meters)
from hetflow.platform.spec import ProcessingElement

from hetflow.runtime.report import RunReport


def part_of(e: ProcessingElement) -> str:
    """The part of the machine whose energy counts element `e`'s."""
    if e.kind == "gpu" and e.device_index is not None:
        return f"gpu{e.device_index}"
    return "cpu" if e.kind == "cpu" else e.name


def local_meters(elements: Mapping[str, ProcessingElement], powercap: Path | None = None
                 ) -> tuple[dict[str, list[EnergyMeter]], dict[str, str]]:
    """The counters of this machine for each part the elements use, and why a part has none
    (`powercap`: where powercap's sysfs is, default /sys/class/powercap)."""
    parts = {part_of(e) for e in elements.values()}
    gpus = {part_of(e): e.device_index for e in elements.values()
            if e.kind == "gpu" and e.device_index is not None}
    nvml, missing = nvml_meters(gpus)
    meters: dict[str, list[EnergyMeter]] = {m.name: [m] for m in nvml}
    if "cpu" in parts:
        rapl, why = rapl_meters(powercap or POWERCAP)
        if rapl:
            meters["cpu"] = list(rapl)
        else:
            missing["cpu"] = why
    for p in parts - meters.keys() - missing.keys():
        missing[p] = "no counter for this kind of element"
    return meters, missing


@dataclass
class EnergyRecorder:
    """The samplers of a run's counters, started before the run (`start_energy`) and read
    once its report says where the steady window lay (`finish`)."""

    elements: Mapping[str, ProcessingElement]
    sampler: EnergySampler
    part_of_meter: dict[str, str]  # meter name -> part
    missing: dict[str, str]

    def __enter__(self) -> "EnergyRecorder":
        return self

    def __exit__(self, *exc) -> None:
        self.sampler.stop()  # no sampling thread outlives a run that failed

    def finish(self, report: RunReport) -> dict[str, Any]:
        """Stop sampling; the energy of the report's window, as `run_energy` gives it."""
        self.sampler.stop()
        measured: dict[str, list[WindowEnergy]] = {}
        if report.window_at is not None:
            for w in self.sampler.window(*report.window_at):
                measured.setdefault(self.part_of_meter[w.name], []).append(w)
        return run_energy(report, self.elements, measured, self.missing)


def start_energy(elements: Mapping[str, ProcessingElement], local: bool = True,
                 powercap: Path | None = None) -> EnergyRecorder:
    """Start reading the counters of the parts `elements` use; with `local` False (elements
    on other nodes) none is read and every part is modelled."""
    if local:
        meters, missing = local_meters(elements, powercap)
    else:
        meters = {}
        missing = {part_of(e): "the elements may run on other nodes; counters are read on "
                               "this one only" for e in elements.values()}
    flat = [m for ms in meters.values() for m in ms]
    part_of_meter = {m.name: p for p, ms in meters.items() for m in ms}
    return EnergyRecorder(elements, EnergySampler(flat).start(), part_of_meter, missing)


def with_energy(elements: Mapping[str, ProcessingElement], run: Callable[[], RunReport],
                powercap: Path | None = None) -> RunReport:
    """`run()`'s report (a baseline's, which has a steady window) with the energy of that
    window, read as `hetflow run` reads a plan's (`start_energy`)."""
    with start_energy(elements, powercap=powercap) as recorder:
        report = run()
    report.energy = recorder.finish(report)
    return report


def run_energy(report: RunReport, elements: Mapping[str, ProcessingElement],
               measured: Mapping[str, list[WindowEnergy]], missing: Mapping[str, str]
               ) -> dict[str, Any]:
    """The energy figure of a run: for each part its joules, mean watts and joules per frame
    over the steady window, the method, whether the window was long enough for the counter;
    and the totals where every part has a figure. Measured parts come from `measured` (their
    counters' windows), the others are modelled with the reason from `missing`. No NaN: a
    figure that cannot be given is None."""
    window = report.notes.get("window_s") or 0.0
    fps = finite_or_none(report.throughput)
    parts: dict[str, dict[str, Any]] = {}
    for p, ws in sorted(measured.items()):
        joules = None if any(w.joules is None for w in ws) else sum(w.joules for w in ws)
        notes = sorted({w.note for w in ws if w.note})
        parts[p] = {"method": ws[0].method, "joules": joules,
                    "reliable": all(w.reliable for w in ws), "note": "; ".join(notes)}
    for p, why in sorted(missing.items()):
        if p in parts:
            continue
        members = [e for e in elements.values() if part_of(e) == p]
        no_power = [e.name for e in members if e.power_w is None]
        if no_power:
            parts[p] = {"method": f"none ({why}; no power_w for {', '.join(no_power)})",
                        "joules": None, "reliable": False, "note": ""}
            continue
        busy = sum(e.power_w * report.utilisation.get(e.name, 0.0) for e in members)
        parts[p] = {"method": f"modelled ({why})", "joules": busy * window if window else None,
                    "reliable": False, "note": "nominal power_w times the busy share"}
    for part in parts.values():
        j = finite_or_none(part["joules"])
        part["joules"] = j
        part["watts"] = j / window if j is not None and window > 0 else None
        part["joules_per_frame"] = (part["watts"] / fps if part["watts"] is not None and fps
                                    else None)
    complete = bool(parts) and all(p["joules"] is not None for p in parts.values())
    total = sum(p["joules"] for p in parts.values()) if complete else None
    watts = total / window if total is not None and window > 0 else None
    return {"window_s": window if window > 0 else None,
            "joules": total, "watts": watts,
            "joules_per_frame": watts / fps if watts is not None and fps else None,
            "method": {p: v["method"] for p, v in parts.items()},
            "measured": all(v["method"] in ("nvml", "rapl") and v["reliable"]
                            for v in parts.values()) and bool(parts),
            "parts": parts}


def energy_line(energy: Mapping[str, Any]) -> str:
    """One line for the run summary: the figure and, plainly, which counters exist."""
    if not energy:
        return ""
    jpf, watts = energy.get("joules_per_frame"), energy.get("watts")
    head = (f"energy: {jpf:.4g} J/frame, {watts:.1f} W over the {energy['window_s']:.2f} s window"
            if jpf is not None and watts is not None else "energy: no figure")
    methods = "; ".join(f"{p}: {m}" for p, m in energy["method"].items())
    flagged = [f"{p}: {v['note']}" for p, v in energy["parts"].items()
               if v["method"] in ("nvml", "rapl") and not v["reliable"]]
    tail = f" (unreliable: {'; '.join(flagged)})" if flagged else ""
    return f"{head} [{methods}]{tail}"
