"""Measure a model on the processing elements of this machine.

Per-layer times are taken with each layer cut out as a one-layer sub-network and run by the
element's backend, the calling thread pinned to the element. Elements that run alike (same kind,
cluster and core count) are measured once and the times copied to the others.

Two methods:
- 'isolated' (default): each layer runs `repeats` times in a row on a real input (the output of
  the layers before it). On resnet18 (fused Conv+BN+ReLU) on a quiet 16-core Xeon host, the sum
  of the layer medians against the whole model's median was 0.97-1.24 on 1 and 2 cores (eight
  runs, six within 5%), 1.08 on 3-4 cores, but 1.16-1.47 on 5-15 cores: every one-layer run
  wakes ORT's thread pool (spinning is off), which the whole model does once per run. For wide
  CPU elements and for GPUs, time the actual stages with `profile_subnets`.
- 'chain': the one-layer runners are called in topological order with `run`, each call timed,
  like a whole model run. It over-estimated resnet18 by 21-36% on the same cores (the cause is
  not pinned down; glibc's malloc thresholds made no difference). Kept for study.
In 'isolated' mode a runner that offers `benchmark(feeds, repeats, warmup) -> seconds list` (ORT:
outputs preallocated and bound once, so no per-call output copy) or `replay()` (a GPU's device
work on the inputs of the last `run`, border copies excluded) is timed with that, and the cost
of one call (a one-element ReLU) is taken off every layer: inside a stage, layers follow each
other without a call each (on a GPU, inside one captured graph). Border copies are priced by
the communication model instead.
"""
from __future__ import annotations

import datetime
import multiprocessing
import os
import platform as _pyplatform
import time
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from hetflow import interrupt
from hetflow.backends import backend_for, pinned
from hetflow.backends.reuse import build_together, release, runners_for
from hetflow.errors import BackendError, InputError
from hetflow.model.subnet import Subnet, extract_subnet, subnet_key
from hetflow.platform.configs import distinct_elements
from hetflow.platform.detect import core_cur_freq_mhz
from hetflow.platform.spec import ProcessingElement, cpu_element_name
from hetflow.profile import comm as commbench
from hetflow.profile.profile import Profile, Stats
import importlib.util
import queue
import threading
from hetflow.backends.affinity import pin_current_thread
from hetflow.platform.configs import finest_config
from hetflow.runtime.baselines import measure_parallel
from hetflow.runtime.ceiling import firing_seconds
from hetflow.runtime.inputs import random_source
from onnx import TensorProto, helper

if TYPE_CHECKING:
    from hetflow.model.graph import CnnGraph
    from hetflow.platform.spec import Platform

METHODS = ("isolated", "chain")


def stats(times: Sequence[float]) -> Stats:
    t = np.asarray(times, dtype=float)
    return {"median": float(np.median(t)), "p10": float(np.percentile(t, 10)),
            "p90": float(np.percentile(t, 90)), "max": float(np.max(t)), "n": int(len(t))}


def random_feeds(graph: "CnnGraph", names: Iterable[str], seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of the right shape and dtype: N(0,1) floats, zeros for integer tensors."""
    rng = np.random.default_rng(seed)
    out = {}
    for n in names:
        info = graph.tensors[n]
        dt = np.dtype(info.dtype)
        out[n] = (rng.standard_normal(info.shape).astype(dt) if dt.kind == "f"
                  else np.zeros(info.shape, dtype=dt))
    return out


def device_timed(runner) -> bool:
    return hasattr(runner, "benchmark") or hasattr(runner, "replay")


def time_runner(runner, feeds: Mapping[str, np.ndarray], repeats: int, warmup: int,
                end_to_end: bool = False) -> list[float]:
    """Seconds of `repeats` runs after `warmup` runs, on the same input. `end_to_end`: time
    `runner.run` as the runtime calls it (host arrays in and out, copies included)."""
    bench = None if end_to_end else getattr(runner, "benchmark", None)
    if bench is not None:
        return list(bench(feeds, repeats=repeats, warmup=warmup))
    replay = None if end_to_end else getattr(runner, "replay", None)
    if replay is not None:  # device work only; the inputs are staged once by run()
        runner.run(feeds)
        step = replay
    else:
        def step() -> None:
            runner.run(feeds)
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        interrupt.check()  # a run swallowed the signal: measure nothing more
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times


def relu_subnet(name: str, n: int) -> Subnet:
    """A one-layer sub-network: ReLU over n floats, x -> y (what the calibrations time)."""

    model = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], name,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])]),
        opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return Subnet(name, ("relu",), model, ["x"], ["y"])


def call_overhead_s(backend, element: ProcessingElement, repeats: int, warmup: int) -> float:
    """Median time of running a one-element ReLU: the fixed cost of one call on `element`
    (launch and synchronisation on a GPU)."""
    runner = backend.prepare(relu_subnet("call-overhead", 1), element)
    try:
        return float(np.median(time_runner(runner, {"x": np.zeros((1, 1), np.float32)},
                                           max(repeats, 20), warmup)))
    finally:
        runner.close()


BORDER_SIZES = (256 << 10, 1 << 20, 4 << 20)  # bytes of a firing's input (and its output)


def border_cost(backend, element: ProcessingElement, writer_core: int | None,
                sizes: Sequence[int] = BORDER_SIZES, repeats: int = 20) -> dict[str, float]:
    """What a firing in the engine pays for its borders beyond the profiled time of its layers,
    fitted as a + b * (input + output bytes): a ReLU run as the engine runs it (an input another
    core just wrote, handed over by a queue; a fresh output array, kept while later firings
    run, as a channel keeps it) against the same ReLU timed as layers are (input and output
    bound once, in cache). On the 2-core VM a squeezenet1_0 phase fed from the other core
    fired 0.1-0.8 ms above its layers' profiled sum, growing with its border bytes.
    `writer_core`: the core that writes the inputs (None: the caller writes them)."""


    points: list[tuple[float, float]] = []
    for nbytes in sizes:
        n = max(1, nbytes // 4)
        runner = backend.prepare(relu_subnet("border", n), element)
        pool = [np.zeros((1, n), np.float32) for _ in range(4)]
        handoff: queue.Queue = queue.Queue(maxsize=2)

        def write() -> None:  # the producer: each input written just before it is handed over
            if writer_core is not None:
                pin_current_thread([writer_core])
            for i in range(repeats + 5):
                pool[i % len(pool)][...] = i
                handoff.put(pool[i % len(pool)])
            handoff.put(None)

        try:
            with pinned(runner.caller_cores or element.cores):
                in_cache = float(np.median(time_runner(runner, {"x": pool[0]}, repeats, 5)))
                writer = threading.Thread(target=write, name="hetflow-border-writer",
                                          daemon=True)
                writer.start()
                kept: list = []
                fired = []
                while (x := handoff.get()) is not None:
                    t0 = time.perf_counter()
                    kept.append(runner.run({"x": x}))
                    fired.append(time.perf_counter() - t0)
                    del kept[:-8]
                writer.join()
        finally:
            runner.close()
        points.append((2.0 * n * 4, float(np.median(fired[5:])) - in_cache))
    return commbench.fit_linear([p[0] for p in points], [max(p[1], 0.0) for p in points])


def observed_freq_mhz(cores: Iterable[int]) -> float | None:
    fs = [f for f in (core_cur_freq_mhz(c) for c in cores) if f]
    return float(np.mean(fs)) if fs else None


def _spin(core: int, seconds: float) -> None:  # runs in a child process
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def all_busy_freq_mhz(cores: Sequence[int], seconds: float = 1.0) -> dict[int, float | None]:
    """Frequency of each core while every core is busy (Kang et al.'s calibration point)."""
    ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    procs = [ctx.Process(target=_spin, args=(c, seconds), daemon=True) for c in cores]
    for p in procs:
        p.start()
    time.sleep(seconds * 0.6)
    freqs = {c: core_cur_freq_mhz(c) for c in cores}
    for p in procs:
        p.join()
    return freqs


class _Progress:
    """A rich progress bar, or nothing."""

    def __init__(self, enabled: bool):
        self.bar = None
        if enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn)

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(), transient=False,
                                console=Console(stderr=True))

    def __enter__(self):
        if self.bar:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.__exit__(*exc)

    def task(self, description: str, total: int = 1) -> "_Task":
        if not self.bar:
            return _Task(None, None)
        return _Task(self.bar, self.bar.add_task(description, total=total))


class _Task:
    def __init__(self, bar, tid):
        self.bar, self.tid = bar, tid

    def total(self, n: int) -> None:
        if self.bar:
            self.bar.update(self.tid, total=n)

    def advance(self, n: int = 1) -> None:
        if self.bar:
            self.bar.advance(self.tid, n)


def _resolve_elements(platform: "Platform", elements) -> list[ProcessingElement]:
    every = {e.name: e for e in platform.all_elements()}
    if elements is None:
        return list(every.values())
    out = []
    for e in elements:
        if isinstance(e, ProcessingElement):
            out.append(e)
        elif e in every:
            out.append(every[e])
        else:
            raise InputError(f"platform {platform.name!r} has no element {e!r} "
                             f"(elements: {', '.join(every)})")
    return out


def _element_info(e: ProcessingElement, profiled_as: str, **extra: Any) -> dict[str, Any]:
    d = {"kind": e.kind, "cores": list(e.cores), "cluster": e.cluster,
         "device_index": e.device_index, "model": e.model, "profiled_as": profiled_as, **extra}
    return {k: v for k, v in d.items() if v is not None}


def _revision(e: ProcessingElement) -> dict[str, int]:
    """{"backend_revision": n} of the backend that times `e`, where above the first."""
    n = backend_for(e).revision
    return {"backend_revision": n} if n > 1 else {}


def _measure_layers(graph: "CnnGraph", element: ProcessingElement, method: str, repeats: int,
                    warmup: int, backend_opts: Mapping[str, Any], task: "_Task"
                    ) -> tuple[dict[str, Stats], Stats, float | None, float]:
    """Layer stats, whole-model stats, the observed frequency and the per-call overhead that
    was taken off each layer (runners with a timing hook: inside a stage, layers follow each
    other without a call each, on a GPU inside one captured graph)."""
    backend = backend_for(element)
    task.total(len(graph.layers) + 1)
    cuts = [extract_subnet(graph, [l.name]) for l in graph.layers]
    runners = list(zip((l.name for l in graph.layers), build_together(
        [lambda sub=sub: backend.prepare(sub, element, **backend_opts) for sub in cuts],
        [element.kind == "cpu"] * len(cuts))))
    everything = [l.name for l in graph.layers]
    whole = (runners_for(graph, everything, element, name=f"{graph.name}[all]")[0]
             if not backend_opts else
             backend.prepare(extract_subnet(graph, everything, name=f"{graph.name}[all]"),
                             element, **backend_opts))
    caller = runners[0][1].caller_cores if runners else element.cores[:1]
    freqs: list[float] = []
    try:
        with pinned(caller) if caller else nullcontext():
            env = random_feeds(graph, graph.inputs)
            for _, r in runners:  # one pass gives every layer a real input
                env.update(r.run(env))
            # a GPU runner's run() includes its border copies: it is always timed isolated
            chain = method == "chain" and not any(hasattr(r, "replay") for _, r in runners)
            hooked = not chain and any(device_timed(r) for _, r in runners)
            times: dict[str, list[float]] = {name: [] for name, _ in runners}
            if chain:
                task.total(warmup + repeats + 1)
                env = random_feeds(graph, graph.inputs)
                for it in range(warmup + repeats):
                    for name, r in runners:
                        feeds = {k: env[k] for k in r.inputs}
                        t0 = time.perf_counter()
                        out = r.run(feeds)
                        dt = time.perf_counter() - t0
                        env.update(out)
                        if it >= warmup:
                            times[name].append(dt)
                    f = observed_freq_mhz(element.cores)
                    if f:
                        freqs.append(f)
                    task.advance()
            else:
                for name, r in runners:
                    times[name] = time_runner(r, {k: env[k] for k in r.inputs}, repeats, warmup)
                    task.advance()
            # the whole model as the runtime calls it: host arrays in and out, copies included
            whole_times = time_runner(whole, random_feeds(graph, graph.inputs), repeats, warmup,
                                      end_to_end=True)
            overhead = call_overhead_s(backend, element, repeats, warmup) if hooked else 0.0
            task.advance()
            f = observed_freq_mhz(element.cores)
            if f:
                freqs.append(f)
    finally:
        release([*(r for _, r in runners), whole])
    # floor at 0.1 us: a layer never costs nothing, and zero times break rate computations
    layer_stats = {n: stats([max(x - overhead, 1e-7) for x in t]) for n, t in times.items()}
    return layer_stats, stats(whole_times), float(np.mean(freqs)) if freqs else None, overhead


def _new_profile(graph: "CnnGraph", platform: "Platform", estimated: bool) -> Profile:
    return Profile(model_name=graph.name, model_hash=graph.model_hash,
                   platform_name=platform.name, platform_hash=platform.platform_hash,
                   estimated=estimated,
                   meta={"created": datetime.datetime.now(datetime.timezone.utc).isoformat(
                       timespec="seconds"), "host": _pyplatform.node(),
                       "fused": any(len(l.nodes) > 1 for l in graph.layers)})


def _derived_accelerators(profile: Profile, graph: "CnnGraph", platform: "Platform",
                          wanted: list[ProcessingElement]) -> None:
    """Accelerators without a backend but with a speed factor: time = reference / factor."""
    for e in wanted:
        if e.kind != "accel" or e.speed_factor is None or e.name in profile.layer_times:
            continue
        ref = cpu_element_name(platform.free_cores(platform.cluster(e.relative_to)))
        if ref not in profile.layer_times:
            profile.meta.setdefault("skipped", {})[e.name] = (
                f"its speed factor is relative to {ref}, which was not measured")
            continue
        profile.layer_times[e.name] = {
            l: {"median": s["median"] / e.speed_factor, "p10": s["p10"] / e.speed_factor,
                "p90": s["p90"] / e.speed_factor, "n": 0}
            for l, s in profile.layer_times[ref].items()}
        profile.elements[e.name] = _element_info(
            e, ref, derived=f"{ref} / speed_factor {e.speed_factor}")


def profile_model(graph: "CnnGraph", platform: "Platform",
                  elements: Iterable[ProcessingElement | str] | None = None, repeats: int = 20,
                  warmup: int = 3, progress: bool = True, method: str = "isolated",
                  comm: bool = True, comm_sizes: Sequence[int] = commbench.DEFAULT_SIZES,
                  comm_repeats: int = 5, dvfs_calibration: bool = False,
                  backend_opts: Mapping[str, Any] | None = None,
                  skip_unavailable: bool = False, lanes: bool = True,
                  lane_seconds: float = 1.0, time_limit_s: float | None = None,
                  required: Iterable[str] = (), contention: bool = True,
                  keep_partial: bool = False, batch_budget_s: float | None = -1,
                  cpu_batches: bool = False, power_seconds: float | None = None) -> Profile:
    """Measure every layer of `graph` on `elements` (default: every element of every
    configuration of `platform`), the whole model on each, and the communication links.
    `lanes`: time the whole model on each GPU element at several lane counts (profile/lanes.py),
    each lane count about `lane_seconds` alone and as long beside busy CPU copies; with them,
    its batch table (`profile.gpu_batches`, lanes.measure_batches), each (batch, lanes) about
    half `lane_seconds`, within `batch_budget_s` seconds per GPU (-1: 40 x `lane_seconds`;
    None: no bound; 0: no batch table). `cpu_batches`: time the whole model at batches on each
    single-core CPU element shape, kept where a frame runs faster (lanes.measure_cpu_batches).
    `power_seconds`: windows over which each part's idle and each shape's busy power are read
    from energy counters (`profile.power`; None: POWER_WINDOW_S, 0: not read).

    `time_limit_s`: the elements of `required` (names; all when empty), lanes and links come
    first; each other shape only if expected to end within the limit, else it is listed in
    `profile.meta['skipped']` and `['partial']`.

    An element whose backend is missing here is skipped (`meta['skipped']`) when `elements`
    is None or `skip_unavailable`, else an error.
    `dvfs_calibration`: scale times by (observed frequency / all cores busy), as Kang et al.
    `contention`: each core's whole-model rate while every core runs a copy and each GPU its
    busy lanes (`calibration["busy_fps"]`, `["busy_lanes"]`), which `hetflow map` predicts with.
    `keep_partial`: a signal ends the measurement and the profile so far is returned, its
    `meta["interrupted"]` naming the signal (else the interrupt propagates)."""
    if method not in METHODS:
        raise InputError(f"profile method {method!r}: choose one of {', '.join(METHODS)}")
    if repeats < 1 or warmup < 0:
        raise InputError(f"repeats must be >= 1 and warmup >= 0 (got {repeats}, {warmup})")
    platform.check_devices()
    started = time.perf_counter()
    explicit = elements is not None and not skip_unavailable
    wanted = _resolve_elements(platform, elements)
    prof = _new_profile(graph, platform, estimated=False)
    prof.meta.update(method=method, repeats=repeats, warmup=warmup, lane_seconds=lane_seconds,
                     backend_opts=dict(backend_opts or {}))
    measurable, skipped = _measurable(wanted, explicit)
    groups = distinct_elements(measurable)
    must = set(required)
    first = {r: m for r, m in groups.items()
             if time_limit_s is None or not must or must & {e.name for e in m}}
    later = {r: m for r, m in groups.items() if r not in first}
    overheads: dict[str, float] = {}  # per-call cost taken off each layer time
    borders: dict[str, dict[str, float]] = {}  # per-firing border cost (border_cost)
    all_cores = sorted({c for e in measurable for c in e.cores})
    phase_s: dict[str, float] = {}  # where the profiling time went

    def measure(rep: ProcessingElement, members: list[ProcessingElement]) -> None:
        task = bar.task(f"{rep.name} ({len(graph.layers)} layers)")
        t0 = time.perf_counter()
        layers, whole, freq, overhead = _measure_layers(graph, rep, method, repeats, warmup,
                                                        backend_opts or {}, task)
        phase_s[f"layers@{rep.name}"] = round(time.perf_counter() - t0, 2)
        if overhead:
            overheads.update({e.name: overhead for e in members})
        if rep.kind == "cpu" and rep.backend != "none":
            writer = next((c for c in all_cores if c not in rep.cores), None)
            cost = border_cost(backend_for(rep), rep, writer)
            borders.update({e.name: cost for e in members})
        for e in members:
            prof.layer_times[e.name] = {k: dict(v) for k, v in layers.items()}
            prof.whole_model[e.name] = dict(whole)
            prof.elements[e.name] = _element_info(e, rep.name, **_revision(e))
            prof.cpu_freq_mhz[e.name] = freq

    with _Progress(progress) as bar, _kept_on_interrupt(keep_partial, prof):
        for rep, members in first.items():
            measure(rep, members)
        t0 = time.perf_counter()
        if lanes:
            budget = 40 * lane_seconds if batch_budget_s == -1 else batch_budget_s
            _measure_lanes(prof, graph, platform, measurable, bar, lane_seconds, budget)
        if cpu_batches:
            _measure_cpu_batches(prof, graph, groups, bar)
        t1 = time.perf_counter()
        if comm:
            _measure_comm(prof, measurable, comm_sizes, comm_repeats, bar)
        t2 = time.perf_counter()
        firing_s = _measure_engine_firing(all_cores, bar) if comm and all_cores else None
        phase_s.update(lanes=round(t1 - t0, 2), comm=round(t2 - t1, 2),
                       engine=round(time.perf_counter() - t2, 2))
        t2 = time.perf_counter()
        busy_fps, busy_lanes = (_busy_rates(prof, graph, measurable, 0.5 * lane_seconds, bar)
                                if contention else ({}, {}))
        if busy_fps:
            phase_s["contention"] = round(time.perf_counter() - t2, 2)
        # the shapes measured so far (under a time limit, the others may not be at all)
        _measure_power(prof, graph, [e for ms in first.values() for e in ms], bar,
                       power_seconds, phase_s, every_batch=time_limit_s is None)
        for rep, members in later.items():  # only with a time limit
            why = _past_the_limit(rep, first, phase_s, time.perf_counter() - started,
                                  time_limit_s)
            if why:
                skipped.update({e.name: why for e in members})
                prof.meta.setdefault("partial", []).extend(e.name for e in members)
                continue
            measure(rep, members)
            first[rep] = members
    if not prof.meta.get("interrupted"):
        _derived_accelerators(prof, graph, platform, wanted)
        if dvfs_calibration:
            _calibrate_dvfs(prof, platform, measurable)
        else:
            prof.calibration = {"dvfs": False}
        found = {"call_overhead_s": overheads, "border_s": borders, "engine_firing_s": firing_s,
                 "busy_fps": busy_fps, "busy_lanes": busy_lanes if busy_fps else None}
        prof.calibration.update({k: v for k, v in found.items() if v is not None and v != {}})
        if skipped:
            prof.meta.setdefault("skipped", {}).update(skipped)
        prof.meta["phase_seconds"] = phase_s
    prof.meta["seconds"] = round(time.perf_counter() - started, 2)
    return prof


def _measure_power(prof, graph, elements: list[ProcessingElement], bar, seconds: float | None,
                   phase_s: dict[str, float], every_batch: bool = True) -> None:
    """The idle and busy power of `elements` into `prof.power` (`profile.power`; seconds a
    window, None: its default, 0: none; `every_batch`: see `power.gpu_settings`)."""
    from hetflow.profile.power import POWER_WINDOW_S, measure_power  # power imports lanes

    seconds = POWER_WINDOW_S if seconds is None else seconds
    if seconds <= 0:
        return
    t0 = time.perf_counter()
    task = bar.task("power: idle, then each element busy")
    prof.power = measure_power(graph, elements, prof, seconds, every_batch)
    task.advance()
    if prof.power.get("idle"):
        phase_s["power"] = round(time.perf_counter() - t0, 2)


def _past_the_limit(rep: ProcessingElement, measured, phase_s: dict[str, float], spent: float,
                    limit_s: float) -> str | None:
    """Why measuring shape `rep` would pass the profile's time limit after `spent` seconds
    (expected to take the median of the shapes `measured`, those with several cores of its
    kind where there are some), or None."""
    took = [phase_s[f"layers@{r.name}"] for r in measured if r.kind == rep.kind
            and len(r.cores) > 1] or [phase_s[f"layers@{r.name}"] for r in measured]
    expect = float(np.median(took)) if took else 0.0
    if spent + expect <= limit_s:
        return None
    return (f"the profile's time limit ({limit_s:.1f} s) would be passed: "
            f"about {expect:.1f} s per element shape")


def _measurable(wanted: list[ProcessingElement], explicit: bool
                ) -> tuple[list[ProcessingElement], dict[str, str]]:
    """(the elements of `wanted` whose backend runs here, {element: why not} for the others);
    an element named `explicit`ly whose backend is missing is an error. Accelerators with a
    speed factor and no backend are neither: they are derived from the others' times."""
    measurable, skipped = [], {}
    for e in wanted:
        if e.kind == "accel" and e.speed_factor is not None and e.backend == "none":
            continue
        try:
            ok, why = type(backend_for(e)).available()
            if not ok:
                raise BackendError(f"element {e.name!r}: {why}")
            measurable.append(e)
        except BackendError as err:
            if explicit:
                raise
            skipped[e.name] = str(err)
    return measurable, skipped


@contextmanager
def _kept_on_interrupt(keep: bool, prof: Profile) -> Iterator[None]:
    """With `keep`, a signal ends the block and is noted in the profile's meta."""
    try:
        yield
    except KeyboardInterrupt:
        if not keep:
            raise
        prof.meta["interrupted"] = interrupt.signal_name() or "SIGINT"


def _measure_lanes(prof: Profile, graph: "CnnGraph", platform: "Platform",
                   elements: list[ProcessingElement], bar: _Progress, seconds: float,
                   batch_budget_s: float | None = 0) -> None:
    """The lane table and batch table of every GPU element (the batch table when
    `batch_budget_s` is not 0); the busy runs keep single-thread copies on every core that no
    GPU drives (what the data-parallel baseline runs beside the GPU)."""

    from hetflow.profile.lanes import (BATCHES, batch_one_from_lanes, measure_batches,
                                       measure_lanes)

    gpus = [e for e in elements if e.kind == "gpu"]
    if not gpus:
        return
    busy = [e for e in finest_config(platform).elements
            if e.kind == "cpu" and e.backend != "none"]
    for g in gpus:
        task = bar.task(f"{g.name} lanes")
        prof.gpu_lanes[g.name] = measure_lanes(graph, g, busy, seconds=seconds)
        task.advance()
        if batch_budget_s != 0:
            task = bar.task(f"{g.name} batches")
            table = batch_one_from_lanes(prof.gpu_lanes[g.name])  # batch 1: the lane table's
            table.update(measure_batches(graph, g, busy, [b for b in BATCHES if b > 1],
                                         seconds=seconds / 2, budget_s=batch_budget_s))
            prof.gpu_batches[g.name] = table
            task.advance()
    _share_staging(prof, gpus)


def _share_staging(prof: Profile, gpus: list[ProcessingElement]) -> None:
    """One staging cost for the elements of one device and driving cores (its precisions): the
    same host copy, measured once each; their median, so that noise between those measurements
    (1.13-1.32e-10 s a byte on the H200 machine) does not pick a precision where the host
    copy bounds them all."""
    by_host: dict[tuple, list[dict]] = {}
    for g in gpus:
        st = prof.gpu_lanes.get(g.name, {}).get("staging")
        if st:
            by_host.setdefault((g.device_index, tuple(g.cores)), []).append(st)
    for tables in by_host.values():
        if len(tables) > 1:
            shared = float(np.median([t["per_byte"] for t in tables]))
            staged = [t["staged"]["per_byte"] for t in tables if "staged" in t]
            shared_staged = float(np.median(staged)) if staged else None
            for t in tables:
                t.update(per_byte=shared, measured_by=len(tables))
                if "staged" in t:
                    t["staged"] = {**t["staged"], "per_byte": shared_staged}


def _measure_cpu_batches(prof: Profile, graph: "CnnGraph",
                         groups: dict[ProcessingElement, list[ProcessingElement]],
                         bar: _Progress) -> None:
    """The batch table of each single-core CPU element shape, for the elements it stands for,
    where a batch ran a frame faster (else none); every batch's time a frame in
    `meta["cpu_batch_frame_s"]`."""
    from hetflow.profile.lanes import measure_cpu_batches

    for rep, members in groups.items():
        if rep.kind != "cpu" or len(rep.cores) != 1:
            continue
        task = bar.task(f"{rep.name} batches")
        table, per_frame = measure_cpu_batches(graph, rep)
        prof.meta.setdefault("cpu_batch_frame_s", {})[rep.name] = per_frame
        if table:
            prof.gpu_batches.update({e.name: table for e in members})
        task.advance()


def _busy_rates(prof: Profile, graph: "CnnGraph", elements: list[ProcessingElement],
                seconds: float, bar: _Progress) -> tuple[dict[str, float], dict[str, int]]:
    """({element: whole-model frames/s}, {GPU: lanes}) while every single-core CPU element runs
    a copy and every GPU with a lane table runs the whole model at the lanes it has beside busy
    copies: the parallel baseline, shorter. ({}, {}) with fewer than two elements."""

    from hetflow.profile.lanes import best_busy_lanes

    singles = [e for e in elements if e.kind == "cpu" and len(e.cores) == 1
               and e.backend != "none"]
    gpus = [e for e in elements if e.kind == "gpu" and e.name in prof.gpu_lanes]
    if len(singles) + len(gpus) < 2 or not singles:
        return {}, {}
    lanes = {g.name: best_busy_lanes(prof.gpu_lanes[g.name]) for g in gpus}
    task = bar.task("contention: a copy on every core" + (" and GPU" if gpus else ""))
    report = measure_parallel(graph, singles + gpus, random_source(graph), warmup=1,
                              seconds=max(seconds, 0.1), name="busy copies", lanes=lanes)
    task.advance()
    return {e: float(v) for e, v in report.notes["per_element_fps"].items()}, lanes


def _cuda_available() -> bool:

    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def _measure_comm(prof: Profile, elements: list[ProcessingElement], sizes: Sequence[int],
                  repeats: int, bar: _Progress) -> None:
    cpu_cores = sorted({c for e in elements if e.kind == "cpu" for c in e.cores})
    gpus = [e for e in elements if e.kind == "gpu"]
    raw: dict[str, list[list[float]]] = {}
    handoff: float | None = None
    if len(cpu_cores) >= 2:
        task = bar.task("comm cpu->cpu")
        raw["cpu->cpu"] = commbench.bench_cpu_handoff(cpu_cores[0], cpu_cores[-1], sizes, repeats)
        task.advance()
    if gpus:
        if _cuda_available():  # a GPU element's backend may not be CUDA (a stand-in, a profile)
            task = bar.task("comm cpu<->gpu")
            g0 = gpus[0]
            raw.update(commbench.bench_cuda(g0.cores[0] if g0.cores else 0,
                                            g0.device_index or 0, sizes, repeats))
            if len({g.device_index for g in gpus}) >= 2:
                raw["gpu->gpu"] = commbench.bench_cuda_peer(gpus[0].device_index,
                                                            gpus[1].device_index, sizes, repeats)
            driver = g0.cores[0] if g0.cores else None
            other = next((c for c in cpu_cores if c != driver), None)
            if driver is not None and other is not None:
                handoff = commbench.bench_engine_handoff(driver, other)
            task.advance()
    prof.comm_raw.update(raw)
    for link, pts in raw.items():
        prof.comm[link] = commbench.fit_linear([p[0] for p in pts], [p[1] for p in pts])
        if "gpu" in link and handoff is not None:  # the copies alone: add the threads' hand-off
            prof.comm[link]["a"] += handoff
            prof.comm[link]["handoff"] = handoff
    prof.meta["comm"] = {"sizes": list(map(int, sizes)), "repeats": repeats,
                         "cpu->cpu": "queue hand-off between pinned threads + first read"}
    if handoff is not None:
        prof.meta["comm"]["gpu links"] = ("pinned asynchronous copies + the engine's hand-off "
                                          "between the GPU's driving core and a CPU core")


def _measure_engine_firing(cores: list[int], bar: _Progress) -> float:
    """What one firing costs the engine beyond its runner (`runtime.ceiling.firing_seconds`),
    on the first core the profile measured."""

    task = bar.task("engine: cost of a firing")
    firing = firing_seconds(cores[0])
    task.advance()
    return firing


def _calibrate_dvfs(prof: Profile, platform: "Platform", elements: list[ProcessingElement]) -> None:
    busy = all_busy_freq_mhz(platform.cores)
    factors: dict[str, float] = {}
    for e in elements:
        fb = [busy.get(c) for c in e.cores]
        f_busy = float(np.mean(fb)) if fb and all(fb) else None
        f_obs = prof.cpu_freq_mhz.get(e.name)
        factors[e.name] = f_obs / f_busy if (f_obs and f_busy) else 1.0
    for e, k in factors.items():
        if k == 1.0:
            continue
        for table in (prof.layer_times.get(e, {}), {"whole": prof.whole_model.get(e, {})}):
            for st in table.values():
                for q in ("median", "p10", "p90"):
                    if q in st:
                        st[q] *= k
    prof.calibration = {
        "dvfs": True, "all_busy_mhz": {str(c): f for c, f in busy.items()}, "factors": factors,
        "note": ("times scaled by observed / all-busy frequency (Kang et al. 2020, IV-A)"
                 if any(busy.values()) else "no frequency readings here: factors are 1")}


def _split_groups(groups, names: set[str]) -> list[tuple[str | None, list[str]]]:
    """Items are layer lists, or (element name, layer list) pairs."""
    out = []
    for g in groups:
        if (isinstance(g, tuple) and len(g) == 2 and isinstance(g[0], str) and g[0] in names
                and not isinstance(g[1], str)):
            out.append((g[0], list(g[1])))
        else:
            out.append((None, list(g)))
    return out


def profile_subnets(graph: "CnnGraph", platform: "Platform", groups: Iterable,
                    elements: Iterable[ProcessingElement | str] | None = None,
                    profile: Profile | None = None, repeats: int = 20, warmup: int = 3,
                    progress: bool = False,
                    backend_opts: Mapping[str, Any] | None = None,
                    end_to_end: bool = True) -> Profile:
    """Time whole sub-networks (the stages a plan will run), isolated, into `profile`
    (a new one if None). `groups`: layer lists (timed on every element of `elements`), or
    (element name, layer list) pairs (timed on that element only)."""
    platform.check_devices()
    if profile is None:
        profile = _new_profile(graph, platform, estimated=False)
    else:
        profile.check_matches(graph, platform, layers=False)
    every = _resolve_elements(platform, elements)
    # elements given as such may be the platform's at another precision ('cpu0@int8')
    by_name = {e.name: e for e in (*platform.all_elements(), *every)}
    jobs: list[tuple[ProcessingElement, list[str]]] = []
    for el, layers in _split_groups(groups, set(by_name)):
        targets = [by_name[el]] if el else every
        jobs += [(e, layers) for e in targets]
    # equal elements are measured once per group
    work: dict[tuple, tuple[ProcessingElement, list[str], list[ProcessingElement]]] = {}
    for e, layers in jobs:
        k = (e.equivalence_key, subnet_key(layers))
        if k in work:
            work[k][2].append(e)
        else:
            work[k] = (e, layers, [e])
    with _Progress(progress) as bar:
        task = bar.task("sub-networks", len(work))
        for rep, layers, members in work.values():
            sub: Subnet = extract_subnet(graph, layers)
            runner = (backend_for(rep).prepare(sub, rep, **backend_opts) if backend_opts
                      else runners_for(graph, layers, rep)[0])
            try:
                with pinned(runner.caller_cores) if runner.caller_cores else nullcontext():
                    times = time_runner(runner, random_feeds(graph, sub.inputs), repeats, warmup,
                                        end_to_end=end_to_end)
            finally:
                release([runner])
            st = stats(times)
            for e in members:
                profile.subnet_times.setdefault(e.name, {})[sub.key] = dict(st)
                profile.elements.setdefault(e.name, _element_info(e, rep.name, **_revision(e)))
            task.advance()
    return profile
