"""The bench's profile: reused from the cache where one was made for this model and platform
with everything the bench reads, else measured (in a time limit, where a budget gives one) and
cached."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Callable

from hetflow.errors import HetflowError
from contextlib import nullcontext
from hetflow.backends import backend_for, pinned
from hetflow.backends.reuse import release, runners_for
from hetflow.mapping.from_profile import searched_elements
from hetflow.platform.configs import default_config, finest_config
from hetflow.model.accuracy import Tolerance
from hetflow.platform.precision import (DEFAULT_PRECISION, GPU_PREFERENCE,
                                        is_auto, precision_variants)
from hetflow.profile.deviation import (META_KEY, SCREENED_KEY, deviation_failures,
                                       record_deviations, record_screen, screen_gpu_precisions)
from hetflow.profile import profile_model
from hetflow.profile.lanes import lanes_complete
from hetflow.profile.measure import random_feeds, time_runner
from hetflow.profile.profile import Profile


def cache_dir() -> Path:
    return Path(os.environ.get("HETFLOW_CACHE", Path.home() / ".cache" / "hetflow"))


def get_profile(graph, platform, repeats: int, log: Callable[[str], None]):
    """Reuse a cached profile made for this model and platform; else measure and cache it."""
    prof = cached_profile(graph, platform, log)
    return (prof, 0.0) if prof is not None else measure_profile(graph, platform, repeats, log)


def _profile_path(graph, platform, precision: str | None = None) -> Path:
    # a profile of more precisions than fp32 is another file: it holds more elements
    extra = ("" if precision in (None, DEFAULT_PRECISION)
             else "-" + re.sub(r"[^\w.-]+", "_", precision.strip()))
    return (cache_dir() / "profiles" /
            f"{graph.name}-{graph.model_hash[:12]}-{platform.platform_hash[:12]}{extra}.json")


def cached_profile(graph, platform, log: Callable[[str], None], partial: bool = False,
                   precision: str | None = None, tolerance: Tolerance | None = None):
    """The cached profile made for this model and platform (at `precision`: see
    `profiled_elements`), or None; one that a time limit cut short (some element shapes not
    measured) only where `partial`; one whose screen of GPU precisions kept a precision that
    `tolerance` refuses (`screen_gpu_precisions`: those after it were never measured) not."""

    path = _profile_path(graph, platform, precision)
    if path.exists():
        try:
            prof = Profile.load(path)
            prof.check_matches(graph, platform)
            if prof.meta.get("partial") and not partial:
                return None
            if (why := _screen_outdated(prof, tolerance)):
                log(f"not reusing profile {path}: {why}")
                return None
            gpus = [e.name for e in platform.all_elements() if e.kind == "gpu"
                    and e.name in prof.layer_times]
            cpus = [e.name for e in platform.all_elements() if e.kind == "cpu"
                    and e.backend != "none" and e.name in prof.layer_times]
            borders = prof.calibration.get("border_s", {})
            handoffs = all("handoff" in prof.comm.get(link, {}) for link in prof.comm_raw
                           if "gpu" in link)
            # else made before lanes, the firings' border costs, the GPU links' hand-offs,
            # lane counts past 8 or the engine's cost per firing were measured
            stale = stale_elements(prof, profiled_elements(platform, precision))
            if stale:
                log(f"not reusing profile {path}: {stale[0]} was timed by an older version "
                    "of its backend")
                return None
            if (all(g in prof.gpu_lanes and lanes_complete(prof.gpu_lanes[g]) for g in gpus)
                    and all(c in borders for c in cpus) and handoffs
                    and "engine_firing_s" in prof.calibration):
                log(f"reusing profile {path}")
                return prof
        except HetflowError:
            pass
    return None


def _screen_outdated(prof, tolerance: Tolerance | None) -> str | None:
    """Why a profile whose GPU precisions were screened cannot serve `tolerance`: a precision
    it kept now misses it, and those the screen left out after it were never measured."""
    screened = prof.meta.get(SCREENED_KEY)
    if not screened:
        return None
    for name in prof.meta.get(META_KEY, {}):
        if name in prof.layer_times and deviation_failures(prof, name, tolerance or Tolerance()):
            return (f"{name} misses this tolerance, and the precisions after it "
                    f"({', '.join(sorted(screened))}) were not profiled")
    return None


def stale_elements(prof, elements) -> list[str]:
    """Elements of `prof` that its backend timed at another revision than this one's (not
    those derived from another element or imported from a table)."""
    stale = []
    for e in elements:
        info = prof.elements.get(e.name)
        if info is None or e.backend == "none" or "derived" in info or "imported" in info:
            continue
        try:
            now = backend_for(e).revision
        except HetflowError:
            continue
        if info.get("backend_revision", 1) != now:
            stale.append(e.name)
    return stale


def profiled_elements(platform, precision: str | None = None) -> list:
    """The searched elements with a backend, at each precision `precision` allows
    (`precision_variants`; None: the platform's own)."""
    return list({e.name: e for v in precision_variants(platform, precision)
                 for e in searched_elements(v) if e.backend != "none"}.values())


def expected_elements(platform, precision: str | None = None) -> list:
    """The elements a bench's profile will measure, for its time estimate: under 'auto' a GPU
    at fp32 and at one reduced precision (`screen_gpu_precisions` keeps one at most)."""
    every = profiled_elements(platform, precision)
    if not is_auto(precision):
        return every
    reduced = [e for e in every if e.kind == "gpu" and e.precision in GPU_PREFERENCE]
    first: dict[str, str] = {}  # a GPU -> the name of its reduced precision tried first
    for e in sorted(reduced, key=lambda e: GPU_PREFERENCE.index(e.precision)):
        first.setdefault(e.base_name, e.name)
    skipped = {e.name for e in reduced} - set(first.values())
    return [e for e in every if e.name not in skipped]


def screened_precisions(needed, precision: str | None) -> int:
    """Whole-model checks the screen of GPU precisions runs before the profile (at least one
    a GPU under 'auto': the first reduced precision usually passes), of `expected_elements`."""
    if not is_auto(precision):
        return 0
    return sum(e.kind == "gpu" and e.precision != DEFAULT_PRECISION for e in needed)


def measure_profile(graph, platform, repeats: int, log: Callable[[str], None],
                    lane_seconds: float = 1.0, time_limit_s: float | None = None,
                    precision: str | None = None, tolerance: Tolerance | None = None):
    """Measure the profile of this model on this platform and cache it: (profile, seconds).
    With `time_limit_s`, the baselines' element shapes come first and the others only while
    the limit holds (profile_model). `precision`: also the elements at the precisions it
    allows, each checked against the fp32 reference (`record_deviations`); a GPU at each of
    them is required like the baselines' shapes (its layers take a second or two, and
    without them the search cannot offer that precision at all). Under 'auto' each GPU is
    profiled at fp32 and at the first reduced precision within `tolerance`
    (`screen_gpu_precisions`)."""

    path = _profile_path(graph, platform, precision)
    needed, left_out, records = profiled_elements(platform, precision), {}, {}
    t0 = time.perf_counter()
    if is_auto(precision):
        needed, left_out, records = screen_gpu_precisions(graph, needed,
                                                          tolerance or Tolerance())
        for name, why in left_out.items():
            log(f"{name}: {why}")
        if time_limit_s is not None:  # the screen is part of the profile's time
            time_limit_s = max(0.0, time_limit_s - (time.perf_counter() - t0))
    log(f"profiling {graph.name} on {platform.name} ({len(graph.layers)} layers, "
        f"{len(needed)} elements)")
    singles, parallel = baseline_elements(platform)
    # no busy-copies run of its own: the bench's parallel baseline measures that load, longer
    prof = profile_model(graph, platform, elements=needed, repeats=repeats, progress=False,
                         contention=False,
                         lane_seconds=lane_seconds, time_limit_s=time_limit_s,
                         required=[e.name for e in (*singles, *parallel)]
                         + [e.name for e in needed if e.kind == "gpu"],
                         # under a budget, the shortest power windows NVML resolves
                         power_seconds=None if time_limit_s is None else 1.0)
    record_screen(prof, left_out, records)
    record_deviations(prof, graph, needed)
    if precision not in (None, DEFAULT_PRECISION):
        prof.meta["precision"] = precision
    prof.save(path)
    log("profiled: " + ", ".join(f"{k} {v:.1f} s" for k, v in
                                 prof.meta.get("phase_seconds", {}).items())
        + f"; the engine's cost per firing {prof.engine_firing() * 1e6:.1f} us")
    for g, table in prof.gpu_lanes.items():
        if table.get("seconds"):
            log(f"lane table of {g}: " + ", ".join(f"{k} {v:.1f} s"
                                                   for k, v in table["seconds"].items()))
    if prof.meta.get("partial"):
        log(f"profile within {time_limit_s:.1f} s: the search leaves out the core groups "
            f"{', '.join(prof.meta['partial'])}")
    return prof, time.perf_counter() - t0


def baseline_elements(platform):
    """(peak-single candidates, parallel-copy elements) of a platform."""

    singles = [e for e in default_config(platform).elements if e.backend != "none"]
    parallel = [e for e in finest_config(platform).elements if e.backend != "none"]
    return singles, parallel


def probe(graph, element) -> tuple[float, float]:
    """(seconds to build the whole model's runner on `element`, seconds of one frame there).
    Inside reusing_runners the runner is kept: the profile and the baselines take it again."""


    t0 = time.perf_counter()
    runner = runners_for(graph, [l.name for l in graph.layers], element)[0]
    build_s = time.perf_counter() - t0
    try:
        with pinned(runner.caller_cores) if runner.caller_cores else nullcontext():
            times = time_runner(runner, random_feeds(graph, graph.inputs), 3, 1,
                                end_to_end=True)
    finally:
        release([runner])
    return build_s, sorted(times)[1]
