"""Build the mapping `Problem` from a profile and a platform."""
from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import numpy as np

from hetflow.errors import InputError
from hetflow.model.graph import CnnGraph
from hetflow.platform.configs import build_config, count_configurations

from hetflow.mapping.energy import element_powers
from hetflow.mapping.problem import Problem
from hetflow.mapping.calibration import calibrate, profile_calibration
from hetflow.model.subnet import subnet_key
from hetflow.platform.configs import configurations
from hetflow.model.accuracy import Tolerance
from hetflow.platform.precision import DEFAULT_PRECISION, is_auto, precision_variants
from hetflow.profile.deviation import deviation_failures
from hetflow.profile.lanes import parse_batch_key

MAX_CONFIGS = 40


def _curated_partitions(n: int) -> list[tuple[int, ...]]:
    """For big clusters: one group, all single cores, two halves, (n-1, 1), and near-uniform
    groups of 2 to 5 cores. The mid-size groups are the latency/throughput trade-off: on the
    GPU machine a frame on one core took 10-350 ms, on 15 cores 2-47 ms, and a plan whose
    latency must stay under half the parallel copies' p99 needs groups in between."""
    if n == 0:
        return [()]
    cands = {(n,), (1,) * n, tuple(sorted((n - n // 2, n // 2), reverse=True)), (n - 1, 1)}
    for size in range(2, 6):
        if n > size:
            cands.add((size,) * (n // size) + ((n % size,) if n % size else ()))
    return sorted({tuple(x for x in p if x > 0) for p in cands})


def select_configurations(platform, max_configs: int = MAX_CONFIGS):
    """All configurations when there are few; a representative subset otherwise."""

    if count_configurations(platform) <= max_configs:
        return list(configurations(platform))
    per = [_curated_partitions(len(platform.free_cores(cl))) for cl in platform.clusters]
    names = [cl.name for cl in platform.clusters]
    return [build_config(platform, dict(zip(names, combo))) for combo in itertools.product(*per)]


def searched_elements(platform) -> list:
    """The elements of the configurations the search considers (on a big machine, far fewer
    than every element of every configuration), in first-seen order."""
    seen: dict = {}
    for cfg in select_configurations(platform):
        for e in cfg.elements:
            seen.setdefault(e.name, e)
    return list(seen.values())


def precision_configurations(profile, platform, precision: str | None = None,
                             tolerance: Tolerance | None = None) -> list:
    """The configurations of `platform` at each precision `precision` allows
    (`precision_variants`: fp32 for None, one setting, or 'auto'), without the elements
    whose precision misses `tolerance` on the profile's check. Each configuration is one
    variant's, so a plan runs each device at one precision.

    A setting the profile never measured, or that misses the tolerance, is an InputError
    naming the element and the setting; under 'auto' such an element is not offered (nor an
    element of another precision than fp32 that the profile did not check)."""
    tolerance = tolerance or Tolerance()
    auto = is_auto(precision)
    configs = [c for v in precision_variants(platform, precision)
               for c in select_configurations(v)]
    where = f"profile {profile.source}" if profile.source else "the profile"
    devices: dict[str, list] = {}  # a device or cluster at another precision -> its elements
    for e in (e for c in configs for e in c.elements if e.precision != DEFAULT_PRECISION):
        device = e.cluster if e.kind == "cpu" else e.base_name
        devices.setdefault(f"{device}@{e.precision}", []).append(e)
    refused: set[str] = set()
    for members in devices.values():
        measured = [e for e in members if e.name in profile.layer_times]
        if not measured and not auto:
            raise InputError(f"{where} has no times for element {members[0].name} (--precision "
                             f"{precision}); profile with --precision {precision}")
        for e in measured:
            failures = deviation_failures(profile, e.name, tolerance)
            if failures is None and auto and not profile.estimated:
                refused.add(e.name)  # unchecked: only fp32 is offered without a check
            elif failures:
                if not auto:
                    raise InputError(
                        f"element {e.name} (--precision {precision}) misses the tolerance on "
                        f"{where}'s check: {'; '.join(failures)} (loosen --tolerance or "
                        f"choose another precision)")
                refused.add(e.name)
    return [replace(c, elements=tuple(e for e in c.elements if e.name not in refused))
            for c in configs]


def problem_from_profile(graph: CnnGraph, profile, platform, capacity_frames: int = 2,
                         call_overhead: float | None = None, lanes: bool = True,
                         precision: str | None = None, tolerance: Tolerance | None = None,
                         ) -> Problem:
    """The cost model as the profile measured it, every element alone (`calibrated_problem`
    adds what was measured with elements busy together). `lanes`: give GPU elements the lane
    curves the profile measured (False: one frame at a time on every GPU, as the multi-CNN
    runtimes run them). `precision`, `tolerance`: see `precision_configurations`."""
    profile.check_matches(graph, platform)
    configs = precision_configurations(profile, platform, precision, tolerance)
    elements, seen = [], set()
    usable = []
    for cfg in configs:
        names = [e.name for e in cfg.elements]
        if not all(n in profile.layer_times for n in names):
            names = [n for n in names if n in profile.layer_times]
            if not names:
                continue
        usable.append(names)
        for e in cfg.elements:
            if e.name in profile.layer_times and e.name not in seen:
                seen.add(e.name)
                elements.append(e)
    if not elements:
        raise InputError(f"profile {profile.source or ''} has times for none of the elements of "
                         f"platform {platform.name!r}; profile on this platform first")
    usable = [list(c) for c in dict.fromkeys(tuple(c) for c in usable)]
    times = np.array([[profile.layer_time(l.name, e.name) for e in elements] for l in graph.layers])
    # the engine's own cost per phase firing, as the profile measured it
    overhead = profile.engine_firing() if call_overhead is None else call_overhead
    power, unmeasured = element_powers(getattr(profile, "power", {}), elements)
    problem = Problem(graph, elements, times, profile.transfer_time, overhead, capacity_frames,
                      configurations=usable, power=power, power_unmeasured=unmeasured,
                      subnet_times=measured_subnets(graph, profile, elements),
                      element_overhead={e.name: profile.call_overhead(e.name) for e in elements},
                      border_cost={e.name: profile.border_cost(e.name) for e in elements
                                   if e.kind == "cpu" and any(profile.border_cost(e.name))})
    if lanes:
        from hetflow.profile.lanes import (host_seconds, slowdown_curves, staged_per_byte,
                                           staging_per_byte)

        for e in elements:
            table = profile.gpu_lanes.get(e.name)
            if e.kind == "gpu" and table and "1" in table:
                problem.lane_slowdown[e.name], busy = slowdown_curves(table)
                if busy:
                    problem.lane_slowdown_busy[e.name] = busy
                per_byte = staging_per_byte(table) or host_copy_per_byte(profile)
                borders = sum(graph.tensors[t].nbytes for t in (*graph.inputs, *graph.outputs))
                counts = sorted(int(k) for k in table if k.isdigit())
                for busy_load, into in ((False, problem.host_time),
                                        (True, problem.host_time_busy)):
                    # the whole model's at each lane count, less its copies
                    at = {k: host_seconds(table, busy_load, lanes=k) for k in counts}
                    curve = {k: max(0.0, h - per_byte * borders) for k, h in at.items() if h}
                    if curve:
                        into[e.name] = curve
                problem.host_per_byte[e.name] = per_byte
                staged = staged_per_byte(table)
                if staged:
                    problem.host_staged_per_byte[e.name] = staged
                if "memory" in table:
                    problem.lane_limit[e.name] = int(table["memory"]["max_lanes"])
                for key, stage in profile.stage_lanes.get(e.name, {}).items():
                    problem.stage_slowdown[(e.name, key)] = slowdown_curves(stage)[0]
        problem = with_batches(problem, getattr(profile, "gpu_batches", {}))
    return problem


def with_batches(problem: Problem, tables: dict[str, dict[str, Any]]) -> Problem:
    """`problem` with the batch curves of its elements' batch tables ({element: table}, the
    profile's gpu_batches; `batch_curves`)."""
    alone, busy = {}, {}
    for e in problem.element_index:
        if tables.get(e):
            alone[e], busy[e] = batch_curves(tables[e])
    return replace(problem, batch_slowdown={**problem.batch_slowdown, **alone},
                   batch_slowdown_busy={**problem.batch_slowdown_busy,
                                        **{e: c for e, c in busy.items() if c}})


def batch_curves(table: dict[str, Any]) -> tuple[dict[int, dict[int, float]],
                                                 dict[int, dict[int, float]]]:
    """({k: {b: alone firing of b frames at k lanes / alone firing of one at k}}, the same
    beside busy copies) of one element's batch table (profile.gpu_batches[element], keys
    "b,k"); lane counts measured without batch 1 are left out (nothing to divide by). A firing
    is k * b over the frames/s its lanes ran at where the table has it (stalls included), else
    the median firing, as the lane curves read theirs (profile.lanes.slowdown_curves)."""
    def read(kind: str) -> dict[int, dict[int, float]]:
        times: dict[int, dict[int, float]] = {}
        for key, row in table.items():
            if "," not in key:  # the table's notes ("skipped", "seconds")
                continue
            if kind in row and "median" in row[kind]:
                b, k = parse_batch_key(key)
                fps = row.get(f"{kind}_fps")
                times.setdefault(k, {})[b] = k * b / fps if fps else float(row[kind]["median"])
        return {k: {b: t / per[1] for b, t in sorted(per.items())}
                for k, per in sorted(times.items()) if per.get(1)}

    return read("alone"), read("busy")


def calibrated_problem(graph: CnnGraph, profile, platform, capacity_frames: int = 2,
                       calibration: dict | None = None, precision: str | None = None,
                       tolerance: Tolerance | None = None) -> tuple[Problem, list[dict]]:
    """The cost model `hetflow map` and `hetflow bench` plan with: the profile's, then the
    calibration's steps (`calibration.calibrate`; None: the calibration the profile carries,
    its busy-copies run if it has one). Returns it with the record of the steps applied.
    `precision`, `tolerance`: the element precisions searched (`precision_configurations`)."""

    problem = problem_from_profile(graph, profile, platform, capacity_frames,
                                   precision=precision, tolerance=tolerance)
    return calibrate(problem, profile,
                     profile_calibration(profile) if calibration is None else calibration)


def host_copy_per_byte(profile) -> float:
    """Seconds per byte for a core to copy data another core wrote: the slope of the profile's
    cpu->cpu hand-off (whose consumer copies the array it receives); 0 without one. The lane
    table's own staging measurement (on the driving core, all lanes copying) is preferred."""
    return float(profile.comm.get("cpu->cpu", {}).get("b", 0.0))


def measured_subnets(graph: CnnGraph, profile, elements) -> dict[tuple[str, str], float]:
    """{(element, subnet key): median s} of every sub-network the profile timed as one piece,
    the whole model included: a stage that is one of them costs what was measured, not the sum
    of its layers (on one CPU core the layer sum of mobilenet_v2 was 3x the whole model on the
    GPU machine, which gave a data-parallel plan's GPU three times its share of frames)."""

    names = {e.name for e in elements}
    out = {(e, k): float(st["median"]) for e, per in profile.subnet_times.items() if e in names
           for k, st in per.items()}
    whole = subnet_key(l.name for l in graph.layers)
    for e, st in profile.whole_model.items():
        if e in names and st.get("median"):
            out[(e, whole)] = float(st["median"])
    # a GPU's whole model, or a stage of it timed at its lanes: its one-lane firing from the
    # lane table, a second of firings run as the runtime runs them, rather than the profile's
    # few repeats (on the H100, 5 repeats of resnet18 once gave a median of 3.0 ms where the
    # model ran at 1.6 ms per frame)
    tables = [(e, whole, t) for e, t in getattr(profile, "gpu_lanes", {}).items()]
    tables += [(e, key, t) for e, per in getattr(profile, "stage_lanes", {}).items()
               for key, t in per.items()]
    for e, key, table in tables:
        one = table.get("1", {}).get("alone", {}).get("median")
        if e in names and one:
            out[(e, key)] = float(one)
    return out
