"""The obvious alternatives a plan must beat, measured with the same backends and inputs:

- *single*: the whole model on one element, frames one after another;
- *parallel* (Pipe-All's baseline): independent whole-model copies on every element at once,
  each pulling the next frame as soon as it is free; one copy per element (GPU copies driven by
  their core, single-thread CPU sessions on the other cores).
A GPU may run several copies at once (`lanes`: k CUDA graphs on k streams over one copy of the
weights), as a GPU server's instance groups do: the parallel baseline a GPU user deploys runs
the GPU at its best lane count beside the CPU copies. It may also fire on b frames at once
(`batch`: a copy takes b frames a run, lanes x b frames in flight), as the practitioner's
design runs a GPU at its best measured (b, k).
Latency of a frame is its compute time (a copy never waits on another).
"""
from __future__ import annotations

import itertools
import threading
import time
from typing import Any, Callable


from hetflow.model.graph import CnnGraph
from hetflow.platform.spec import ProcessingElement

from hetflow.runtime.harness import frozen_heap
from hetflow.runtime.report import RunReport, latency_stats
from hetflow.backends import caller_cores_of, pin_current_thread
from hetflow.backends.inflight import InFlight
from hetflow.backends.reuse import release, runners_for, runners_for_many
from hetflow.backends.together import frames_in_window, run_together


def measure_single(graph: CnnGraph, element: ProcessingElement, inputs: Callable[[int], dict],
                   frames: int = 200, warmup: int = 10, seconds: float | None = None,
                   lanes: int = 1, batch: int = 1) -> RunReport:
    label = f"single:{element.name}" + (f" x{lanes} lanes" if lanes > 1 else "") + (
        f" b{batch}" if batch > 1 else "")
    return measure_parallel(graph, [element], inputs, frames, warmup, seconds, name=label,
                            lanes={element.name: lanes}, batch={element.name: batch})


class Batches:
    """An element's batched lanes, driven by its one thread like `InFlight`: each run takes up
    to b frames (`submit_frames`, or `run_frames` where the runners do not launch), runs are
    collected in launch order."""

    def __init__(self, runners: list, batch: int):
        self.free, self.batch = list(runners), batch
        self.busy: list[tuple[Any, float, int, list | None]] = []  # (runner, t0, frames, outs)

    def __len__(self) -> int:
        return len(self.busy)

    def has_room(self) -> bool:
        return bool(self.free)

    def submit(self, frames: list[dict], t0: float) -> None:
        r = self.free.pop()
        if hasattr(r, "submit_frames"):
            r.submit_frames(frames)
            self.busy.append((r, t0, len(frames), None))
        else:
            self.busy.append((r, t0, len(frames), r.run_frames(frames)))

    def collect(self) -> tuple[float, int]:
        """(when the oldest run started, its frames), once it is done."""
        r, t0, n, outs = self.busy.pop(0)
        if outs is None:
            r.collect_frames()
        self.free.append(r)
        return t0, n


def measure_parallel(graph: CnnGraph, elements: list[ProcessingElement],
                     inputs: Callable[[int], dict], frames: int = 200, warmup: int = 10,
                     seconds: float | None = None, name: str = "parallel",
                     lanes: dict[str, int] | None = None,
                     batch: dict[str, int] | None = None) -> RunReport:
    """All copies run at once; throughput counts frames completed by all of them in the window
    after every copy finished its warm-up. `lanes`: copies per element (GPU lanes), default 1;
    `batch`: frames a copy's run takes, default 1 (a frame's latency is its batch's run)."""

    lanes, batch = lanes or {}, {e: b for e, b in (batch or {}).items() if b > 1}
    whole = [l.name for l in graph.layers]
    plain = [e for e in elements if e.name not in batch]
    made = dict(zip([e.name for e in plain], runners_for_many(
        graph, [(whole, e, lanes.get(e.name, 1), f"whole@{e.name}") for e in plain])))
    try:
        for e in elements:
            if e.name in batch:
                made[e.name] = runners_for(graph, whole, e, lanes=lanes.get(e.name, 1),
                                           name=f"whole@{e.name}", batch=batch[e.name])
    except BaseException:
        release([r for rs in made.values() for r in rs])
        raise
    built = [made[e.name] for e in elements]
    runners = [r for rs in built for r in rs]
    # an element's lanes, driven by its one thread
    runs = [Batches(rs, batch[e.name]) if e.name in batch else InFlight(rs)
            for e, rs in zip(elements, built)]
    next_frame = iter(range(10 ** 12))
    lock = threading.Lock()
    records: list[list[tuple[float, float]]] = [[] for _ in elements]  # a frame's each
    firings: list[list[tuple[float, float]]] = [[] for _ in elements]  # a run's each

    def prepare(i: int) -> None:
        pin_current_thread(caller_cores_of(built[i], elements[i]))
        for r in built[i]:
            for w in range(warmup):
                r.run(inputs(w))

    def collect(i: int) -> None:
        t0, n = runs[i].collect()
        span = (t0, time.perf_counter())
        records[i] += [span] * (n if isinstance(runs[i], Batches) else 1)
        firings[i].append(span)

    def step(i: int) -> bool:
        b = batch.get(elements[i].name, 1)
        while runs[i].has_room():
            if b > 1:
                with lock:
                    fs = [f for f in itertools.islice(next_frame, b)
                          if f < frames or seconds is not None]
                if not fs:
                    break
                runs[i].submit([inputs(f) for f in fs], time.perf_counter())
                continue
            with lock:
                f = next(next_frame)
            if f >= frames and seconds is None:
                break
            runs[i].submit(inputs(f), time.perf_counter())
        if not len(runs[i]):
            return False
        collect(i)
        return True

    try:
        with frozen_heap():  # as the engine runs: the caller's heap is not the copies' cost
            window = run_together(f"{name} baseline", [e.name for e in elements], prepare,
                                  step, None if seconds is None
                                  else (lambda elapsed: elapsed >= seconds))
        for i, r in enumerate(runs):  # runs under way at the end count by their share
            while len(r):
                collect(i)
    finally:
        release(runners)
    done = sum(len(r) for r in records)
    lat = [e - s for r in records for s, e in r]
    if window.stop is None:  # a number of frames: the run lasts until the last one is out
        t_end = max((r[-1][1] for r in records if r), default=time.perf_counter())
    else:  # a time window: frames under way at its end count by their share inside it
        t_end = window.stop
    wall = t_end - window.start
    util: dict[str, float] = {}
    fps: dict[str, float] = {}
    for el, r, runs_ in zip(elements, records, firings):
        k = lanes.get(el.name, 1)
        busy = sum(min(e, t_end) - s for s, e in runs_ if s < t_end)  # a batch's run once
        util[el.name] = util.get(el.name, 0.0) + busy / wall / k
        fps[el.name] = fps.get(el.name, 0.0) + frames_in_window(r, window.start, t_end) / wall
    return RunReport(name, done, warmup, sum(fps.values()), latency_stats(lat), util,
                     notes={"elements": [e.name for e in elements], "per_element_fps": fps,
                            "lanes": {e: k for e, k in lanes.items() if k > 1},
                            "window_s": wall, **({"batch": batch} if batch else {})},
                     window_at=(window.start, t_end) if wall > 0 else None)
