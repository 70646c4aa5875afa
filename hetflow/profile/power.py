"""Idle and busy power of each element, read from this machine's energy counters the way
`hetflow run` reads a run's (backends/energy.py: NVML for a GPU, RAPL for the CPU packages).

Each part of the machine (a GPU, the CPU packages together: `runtime.energy.part_of`) is read
idle over one window, then each element shape busy: a GPU running the whole model at one lane,
at its best lane count and at each batch's best lane count (profile's lane and batch tables),
best first, a CPU shape as
copies on as many of its elements as have disjoint cores (a package's uncore power is then
shared as it is in a plan using them; the busy figure is one copy's share). Every part is read
in every busy window, so a GPU's driving core shows on the CPU package too. Windows last
`seconds` (2 s by default: NVML's counter moves in 100 ms steps, and consecutive 2 s windows on
an H100 agreed within 0.1%).

The table (`Profile.power`):
    {"window_s": 2.0,
     "idle": {part: FIGURE},
     "busy": {element: {"b,k": {"busy_share": u, "copies": n, "parts": {part: FIGURE}}}},
     "missing": {part: why it has no counter}}
with FIGURE = {"watts", "method", "seconds", "reliable", "note"}; a busy figure is the watts of
the part while that one element runs, the idle watts plus its copies' rise shared out.
mapping/energy.py reads it into the cost model.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

from hetflow.backends.energy import SAMPLE_PERIOD_S, EnergyMeter, EnergySampler, WindowEnergy
from hetflow.platform.configs import distinct_elements
from hetflow.platform.spec import ProcessingElement
from hetflow.profile.lanes import batch_key, best_count, parse_batch_key
from hetflow.profile.profile import Profile
from hetflow.runtime.baselines import measure_parallel
from hetflow.runtime.energy import local_meters, part_of
from hetflow.runtime.inputs import random_source

if TYPE_CHECKING:
    from hetflow.model.graph import CnnGraph

POWER_WINDOW_S = 2.0
# a window is read this far inside the span its load held: the readings around each end are
# then both taken under that load (the sampler reads every SAMPLE_PERIOD_S; a run's copies
# finish their last firings and free their runners after it is told to stop)
TRIM_S = 2 * SAMPLE_PERIOD_S


def part_figures(windows: list[WindowEnergy], part_of_meter: Mapping[str, str]
                 ) -> dict[str, dict[str, Any]]:
    """{part: FIGURE} of the counters' windows over one span: a part's joules are the sum of its
    counters' (a CPU part's packages), None where one of them has none."""
    by_part: dict[str, list[WindowEnergy]] = {}
    for w in windows:
        by_part.setdefault(part_of_meter[w.name], []).append(w)
    out = {}
    for part, ws in sorted(by_part.items()):
        seconds = ws[0].seconds
        joules = None if any(w.joules is None for w in ws) else sum(w.joules for w in ws)
        out[part] = {"watts": joules / seconds if joules is not None and seconds > 0 else None,
                     "method": ws[0].method, "seconds": round(seconds, 3),
                     "reliable": all(w.reliable for w in ws),
                     "note": "; ".join(sorted({w.note for w in ws if w.note}))}
    return out


def shared_out(busy: Mapping[str, dict[str, Any]], idle: Mapping[str, dict[str, Any]],
               copies: int) -> dict[str, dict[str, Any]]:
    """One copy's figure of a window in which `copies` like elements ran: each part's idle
    watts plus its rise over idle divided among the copies."""
    out = {}
    for part, f in busy.items():
        base = idle.get(part, {}).get("watts")
        watts = f["watts"]
        if watts is not None and base is not None:
            watts = base + (watts - base) / copies
        out[part] = {**f, "watts": watts}
    return out


def disjoint(members: list[ProcessingElement]) -> list[ProcessingElement]:
    """As many of `members` as hold no core in common, in their order."""
    taken: set[int] = set()
    out = []
    for e in members:
        if not taken & set(e.cores):
            out.append(e)
            taken |= set(e.cores)
    return out


def gpu_settings(prof: Profile, element: str, every_batch: bool = True) -> list[tuple[int, int]]:
    """(batch, lanes) a GPU's busy power is read at: one lane, the best lane count alone of its
    lane table, and each batch of its batch table at that batch's best lane count, the best
    (b, k) first (a plan may take any batch: the energy model interpolates between these by
    rate, and a GPU's watts at a batch are not the lane curve's). Without `every_batch`, the
    best (b, k) only: three points spanning the element's rates (a profile under a time
    limit, where each window costs a runner's build besides the window)."""
    out = [(1, 1)]
    lanes = prof.gpu_lanes.get(element, {})
    rates = {int(k): v["alone_fps"] if v.get("alone_fps") else int(k) / v["alone"]["median"]
             for k, v in lanes.items() if k.isdigit() and "alone" in v}
    if rates:
        out.append((1, best_count(rates)))
    batches = {bk: bk[0] * bk[1] / v["alone"]["median"]
               for key, v in prof.gpu_batches.get(element, {}).items()
               if "," in key and v.get("alone", {}).get("median")
               for bk in [parse_batch_key(key)]}
    best_at = {}
    for (b, k), rate in sorted(batches.items(), key=lambda kv: -kv[1]):
        best_at.setdefault(b, (b, k))
    out.extend(list(best_at.values())[:None if every_batch else 1])
    return list(dict.fromkeys(out))


def measure_power(graph: "CnnGraph", elements: list[ProcessingElement], prof: Profile,
                  seconds: float = POWER_WINDOW_S, every_batch: bool = True, powercap=None,
                  sleep: Callable[[float], None] = time.sleep,
                  log: Callable[[str], None] = lambda msg: None) -> dict[str, Any]:
    """The power table of `elements` (see the module's doc). Parts without a counter are listed
    under "missing" with why, and nothing is run for their elements."""
    meters, missing = local_meters({e.name: e for e in elements}, powercap)
    table: dict[str, Any] = {"window_s": seconds, "idle": {}, "busy": {}, "missing": missing}
    if not meters:
        return table
    flat: list[EnergyMeter] = [m for ms in meters.values() for m in ms]
    part_of_meter = {m.name: p for p, ms in meters.items() for m in ms}
    runs = []  # (element shape, its members, batch, lanes, copies run, the run's report)
    with EnergySampler(flat) as sampler:  # windows are read once its last reading is taken
        t0 = time.perf_counter()
        sleep(seconds + TRIM_S)  # nothing starts until readings after the window are taken
        idle_at = (t0, t0 + seconds)
        source = random_source(graph)
        for rep, members in distinct_elements(elements).items():
            if part_of(rep) not in meters:
                continue
            settings = ([(b, k, [rep]) for b, k in gpu_settings(prof, rep.name, every_batch)]
                        if rep.kind == "gpu" else [(1, 1, disjoint(members))])
            for b, k, copies in settings:
                report = measure_parallel(graph, copies, source, warmup=2,
                                          seconds=seconds + 2 * TRIM_S,
                                          name=f"power of {rep.name}",
                                          lanes={e.name: k for e in copies},
                                          batch={e.name: b for e in copies})
                runs.append((rep, members, b, k, copies, report))
    idle = part_figures(sampler.window(*idle_at), part_of_meter)
    table["idle"] = idle
    log("idle: " + ", ".join(f"{p} {f['watts']:.1f} W" for p, f in idle.items()
                             if f["watts"] is not None))
    for rep, members, b, k, copies, report in runs:
        if report.window_at is None:
            continue
        start, stop = report.window_at
        figures = part_figures(sampler.window(start + TRIM_S, max(start + TRIM_S, stop - TRIM_S)),
                               part_of_meter)
        share = sum(report.utilisation.get(e.name, 0.0) for e in copies) / len(copies)
        entry = {"busy_share": round(share, 4), "copies": len(copies),
                 "parts": shared_out(figures, idle, len(copies))}
        watts = entry["parts"].get(part_of(rep), {}).get("watts")
        log(f"busy: {rep.name}" + (f" b{b}" if b > 1 else "") + (f" x{k}" if k > 1 else "")
            + (f" on {len(copies)} copies" if len(copies) > 1 else "")
            + (f": {part_of(rep)} {watts:.1f} W" if watts is not None else ""))
        for e in members:
            table["busy"].setdefault(e.name, {})[batch_key(b, k)] = entry
    return table
