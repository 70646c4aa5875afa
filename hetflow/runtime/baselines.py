"""The obvious alternatives a plan must beat, measured with the same backends and inputs:

- *single*: the whole model on one element, frames one after another;
- *parallel* (Pipe-All's baseline): independent whole-model copies on every element at once,
  each pulling the next frame as soon as it is free; one copy per element (GPU copies driven by
  their core, single-thread CPU sessions on the other cores).
Latency of a frame is its compute time (a copy never waits on another).
"""
from __future__ import annotations

import threading
import time
from typing import Callable


from hetflow.model.graph import CnnGraph
from hetflow.platform.spec import ProcessingElement

from .report import RunReport, latency_stats


def _whole_model_runner(graph: CnnGraph, element: ProcessingElement):
    from hetflow.backends import backend_for
    from hetflow.model.subnet import extract_subnet

    sub = extract_subnet(graph, [l.name for l in graph.layers], name=f"whole@{element.name}")
    return backend_for(element).prepare(sub, element)


def measure_single(graph: CnnGraph, element: ProcessingElement, inputs: Callable[[int], dict],
                   frames: int = 200, warmup: int = 10, seconds: float | None = None) -> RunReport:
    return measure_parallel(graph, [element], inputs, frames, warmup, seconds, name=f"single:{element.name}")


def measure_parallel(graph: CnnGraph, elements: list[ProcessingElement],
                     inputs: Callable[[int], dict], frames: int = 200, warmup: int = 10,
                     seconds: float | None = None, name: str = "parallel") -> RunReport:
    """All copies run at once; throughput counts frames completed by all of them in the window
    after every copy finished its warm-up."""
    from hetflow.backends import pin_current_thread
    from hetflow.backends.together import run_together

    runners = [_whole_model_runner(graph, e) for e in elements]
    next_frame = iter(range(10 ** 12))
    lock = threading.Lock()
    records: list[list[tuple[float, float]]] = [[] for _ in elements]

    def prepare(i: int) -> None:
        pin_current_thread(elements[i].cores)
        for w in range(warmup):
            runners[i].run(inputs(w))

    def step(i: int) -> bool:
        with lock:
            f = next(next_frame)
        if f >= frames and seconds is None:
            return False
        t0 = time.perf_counter()
        runners[i].run(inputs(f))
        records[i].append((t0, time.perf_counter()))
        return True

    try:
        t_start = run_together(f"{name} baseline", [e.name for e in elements], prepare, step,
                               None if seconds is None else (lambda elapsed: elapsed >= seconds))
    finally:
        for r in runners:
            getattr(r, "close", lambda: None)()
    t_end = max((r[-1][1] for r in records if r), default=time.perf_counter())
    done = sum(len(r) for r in records)
    lat = [e - s for r in records for s, e in r]
    util = {el.name: sum(e - s for s, e in r) / (t_end - t_start) for el, r in zip(elements, records)}
    return RunReport(name, done, warmup, done / (t_end - t_start), latency_stats(lat), util,
                     notes={"elements": [e.name for e in elements],
                            "per_element_fps": {el.name: len(r) / (t_end - t_start)
                                                for el, r in zip(elements, records)}})
