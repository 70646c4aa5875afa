"""Communication micro-benchmarks, fitted as t = a + b * bytes (Kang et al. 2020, Section IV-B).

cpu->cpu measures what the runtime does between two CPU stages: a numpy array is handed from a
thread pinned to one core to a thread pinned to another through a `queue.Queue` (no copy: only a
reference moves), and the consumer then reads it once (copies it into its own buffer). The
measured time is the queue latency plus that first read from the other core's cache or DRAM, an
upper bound of what the next stage pays before it computes. Host<->GPU links use pinned host
memory and asynchronous copies (torch, only where CUDA is there); the runtime pays, on top of
those copies, a hand-off between the two elements' threads (`bench_engine_handoff`), which the
cpu->cpu benchmark has in it already.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Iterable, Sequence

import numpy as np

from hetflow.backends.affinity import pin_current_thread, pinned
from hetflow.runtime.engine import FrameChannel
from hetflow.runtime.harness import Control, Stopped

DEFAULT_SIZES = tuple(4 ** k * 1024 for k in range(0, 9))  # 1 KiB .. 64 MiB


def fit_linear(nbytes: Sequence[float], seconds: Sequence[float]) -> dict[str, float]:
    """Least-squares fit of seconds = a + b * bytes, weighted by 1/seconds so that small
    transfers (latency-bound) count as much as large ones (bandwidth-bound). a, b >= 0."""
    x = np.asarray(nbytes, dtype=float)
    y = np.asarray(seconds, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        return {"a": float(max(np.median(y), 0.0)) if len(y) else 0.0, "b": 0.0}
    w = 1.0 / np.maximum(y, 1e-9)
    b, a = np.polyfit(x, y, 1, w=w)
    b = max(float(b), 0.0)
    if a < 0:  # refit the intercept alone with the slope kept
        a = float(np.average(y - b * x, weights=w ** 2))
    return {"a": max(float(a), 0.0), "b": b}


def bench_cpu_handoff(src_core: int, dst_core: int, sizes: Iterable[int] = DEFAULT_SIZES,
                      repeats: int = 5) -> list[list[float]]:
    """[[bytes, median seconds], ...] for handing an array from `src_core` to `dst_core`."""
    sizes = list(sizes)
    handoff: queue.Queue = queue.Queue(maxsize=1)
    done: queue.Queue = queue.Queue(maxsize=1)
    results: list[list[float]] = []

    def consumer() -> None:
        pin_current_thread([dst_core])
        sink = {n: np.empty(n, dtype=np.uint8) for n in sizes}
        while True:
            item = handoff.get()
            if item is None:
                return
            arr, t0 = item
            np.copyto(sink[arr.nbytes], arr)  # the first read of the data on this core
            done.put(time.perf_counter() - t0)

    worker = threading.Thread(target=consumer, name="hetflow-comm-consumer", daemon=True)
    worker.start()
    try:
        with pinned([src_core]):
            for n in sizes:
                src = np.random.default_rng(n).integers(0, 255, n, dtype=np.uint8)
                buf = np.empty(n, dtype=np.uint8)
                times = []
                for _ in range(repeats + 1):  # the first round warms up buffers and pages
                    np.copyto(buf, src)  # the producer writes it: its lines sit on src_core
                    handoff.put((buf, time.perf_counter()))
                    times.append(done.get())
                results.append([float(n), float(np.median(times[1:]))])
    finally:
        handoff.put(None)
        worker.join()
    return results


def bench_engine_handoff(src_core: int, dst_core: int, repeats: int = 200) -> float:
    """Median seconds for the engine to hand a tensor from a thread on `src_core` to one waiting
    on `dst_core`: half a round trip through two of the runtime's own frame channels, each
    consumer blocked on its frame's event as a stage waiting for its input is. A GPU stage's
    runner copies its borders itself, so this wake-up is what a channel to or from a GPU adds
    (17 us on the H100 host; an engine trace on the H200 host had read 30-55 us a crossing
    beyond the copies the model then knew)."""

    n, skip = repeats + 10, 10
    control = Control()
    there, back = FrameChannel("hand-off there", n), FrameChannel("hand-off back", n)
    token = np.zeros(1, np.float32)

    def echo() -> None:
        pin_current_thread([dst_core])
        try:
            for f in range(n):
                back.put(f, there.get(f, control, "echo", "hand-off"), control, "echo", "back")
        except Stopped:
            return

    worker = threading.Thread(target=echo, name="hetflow-handoff-echo", daemon=True)
    worker.start()
    trips: list[float] = []
    try:
        with pinned([src_core]):
            for f in range(n):
                t0 = time.perf_counter()
                there.put(f, token, control, "sender", "there")
                back.get(f, control, "sender", "back")
                trips.append(time.perf_counter() - t0)
    finally:
        control.stop.set()
        worker.join()
    return float(np.median(trips[skip:])) / 2


def bench_cuda(driver_core: int, device_index: int = 0, sizes: Iterable[int] = DEFAULT_SIZES,
               repeats: int = 5) -> dict[str, list[list[float]]]:
    """Host<->GPU copies with pinned host memory: {'cpu->gpu': [[bytes, s]...], 'gpu->cpu': ...}.
    Needs torch with CUDA; the caller checks."""
    import torch

    dev = torch.device("cuda", device_index)
    out: dict[str, list[list[float]]] = {"cpu->gpu": [], "gpu->cpu": []}
    with pinned([driver_core]):
        for n in sizes:
            host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
            gpu = torch.empty(n, dtype=torch.uint8, device=dev)
            for link, (dst, src) in (("cpu->gpu", (gpu, host)), ("gpu->cpu", (host, gpu))):
                times = []
                for _ in range(repeats + 1):
                    torch.cuda.synchronize(dev)
                    t0 = time.perf_counter()
                    dst.copy_(src, non_blocking=True)
                    torch.cuda.synchronize(dev)
                    times.append(time.perf_counter() - t0)
                out[link].append([float(n), float(np.median(times[1:]))])
            del host, gpu
    return out


def bench_cuda_peer(src_index: int, dst_index: int, sizes: Iterable[int] = DEFAULT_SIZES,
                    repeats: int = 5) -> list[list[float]]:
    """GPU->GPU copies between two devices (peer access where the driver allows it)."""
    import torch

    out = []
    for n in sizes:
        a = torch.empty(n, dtype=torch.uint8, device=f"cuda:{src_index}")
        b = torch.empty(n, dtype=torch.uint8, device=f"cuda:{dst_index}")
        times = []
        for _ in range(repeats + 1):
            torch.cuda.synchronize(src_index)
            torch.cuda.synchronize(dst_index)
            t0 = time.perf_counter()
            b.copy_(a, non_blocking=True)
            torch.cuda.synchronize(dst_index)
            times.append(time.perf_counter() - t0)
        out.append([float(n), float(np.median(times[1:]))])
    return out
