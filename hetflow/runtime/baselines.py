"""The obvious alternatives a plan must beat, measured with the same backends and inputs:

- *single*: the whole model on one element, frames one after another;
- *parallel* (Pipe-All's baseline): independent whole-model copies on every element at once,
  each pulling the next frame as soon as it is free; one copy per element (GPU copies driven by
  their core, single-thread CPU sessions on the other cores).
A GPU may run several copies at once (`lanes`: k CUDA graphs on k streams over one copy of the
weights), as a GPU server's instance groups do: the parallel baseline a GPU user deploys runs
the GPU at its best lane count beside the CPU copies.
Latency of a frame is its compute time (a copy never waits on another).
"""
from __future__ import annotations

import threading
import time
from typing import Callable


from hetflow.model.graph import CnnGraph
from hetflow.platform.spec import ProcessingElement

from hetflow.runtime.harness import frozen_heap
from hetflow.runtime.report import RunReport, latency_stats
from hetflow.backends import pin_current_thread
from hetflow.backends.inflight import InFlight
from hetflow.backends.reuse import release, runners_for_many
from hetflow.backends.together import frames_in_window, run_together


def measure_single(graph: CnnGraph, element: ProcessingElement, inputs: Callable[[int], dict],
                   frames: int = 200, warmup: int = 10, seconds: float | None = None,
                   lanes: int = 1) -> RunReport:
    label = f"single:{element.name}" + (f" x{lanes} lanes" if lanes > 1 else "")
    return measure_parallel(graph, [element], inputs, frames, warmup, seconds, name=label,
                            lanes={element.name: lanes})


def measure_parallel(graph: CnnGraph, elements: list[ProcessingElement],
                     inputs: Callable[[int], dict], frames: int = 200, warmup: int = 10,
                     seconds: float | None = None, name: str = "parallel",
                     lanes: dict[str, int] | None = None) -> RunReport:
    """All copies run at once; throughput counts frames completed by all of them in the window
    after every copy finished its warm-up. `lanes`: copies per element (GPU lanes), default 1."""

    lanes = lanes or {}
    whole = [l.name for l in graph.layers]
    built = runners_for_many(graph, [(whole, e, lanes.get(e.name, 1), f"whole@{e.name}")
                                     for e in elements])
    runners = [r for rs in built for r in rs]
    runs = [InFlight(rs) for rs in built]  # an element's lanes, driven by its one thread
    next_frame = iter(range(10 ** 12))
    lock = threading.Lock()
    records: list[list[tuple[float, float]]] = [[] for _ in elements]

    def prepare(i: int) -> None:
        pin_current_thread(elements[i].cores)
        for r in built[i]:
            for w in range(warmup):
                r.run(inputs(w))

    def collect(i: int) -> None:
        t0, _ = runs[i].collect()
        records[i].append((t0, time.perf_counter()))

    def step(i: int) -> bool:
        while runs[i].has_room():
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
    for el, r in zip(elements, records):
        k = lanes.get(el.name, 1)
        busy = sum(min(e, t_end) - s for s, e in r if s < t_end)
        util[el.name] = util.get(el.name, 0.0) + busy / wall / k
        fps[el.name] = fps.get(el.name, 0.0) + frames_in_window(r, window.start, t_end) / wall
    return RunReport(name, done, warmup, sum(fps.values()), latency_stats(lat), util,
                     notes={"elements": [e.name for e in elements], "per_element_fps": fps,
                            "lanes": {e: k for e, k in lanes.items() if k > 1}})
