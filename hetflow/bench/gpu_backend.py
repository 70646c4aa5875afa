"""Throughput of a whole model through the CUDA backend, next to simpler loops (for
scripts/gpu_backend_check.py): benchmarks, kept out of the backend itself."""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import numpy as np
import onnx

from hetflow.backends.torch_cuda import NAME, TorchCudaBackend
from hetflow.errors import BackendError


def timed_loop(fn: Callable[[], Any], seconds: float = 2.0, min_iter: int = 5,
               warmup: int = 3) -> tuple[float, float]:
    """(calls per second over the whole loop, median latency in ms): back-to-back calls for
    `seconds` and at least `min_iter` calls, after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    lat: list[float] = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds or len(lat) < min_iter:
        s = time.perf_counter()
        fn()
        lat.append(time.perf_counter() - s)
    return len(lat) / (time.perf_counter() - t0), statistics.median(lat) * 1e3


def back_to_back_fps(launch: Callable[[], Any], wait: Callable[[], Any],
                     seconds: float = 2.0, warmup: int = 3) -> float:
    """Launches per second with no wait between them and one wait at the end, counted in: the
    device's throughput when frames overlap (the ceiling for several frames in flight)."""
    for _ in range(warmup):
        launch()
    wait()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        launch()
        n += 1
    wait()
    return n / (time.perf_counter() - t0)


def whole_model_cuda_graph_fps(onnx_model: onnx.ModelProto, seconds: float = 2.0,
                               device_index: int = 0) -> dict[str, Any]:
    """Batch-1 throughput of a whole model through this backend with a CUDA graph.

    `graph_fps`/`graph_ms`: graph replay + sync of the stream it ran on, one frame at a time.
    `run_fps`/`run_ms`: `Runner.run` with numpy in and out (border copies included).
    `graph_async_fps`: replays back to back, one sync at the end (see `back_to_back_fps`).

    anchor_bench.py's gpu_graph_fps is none of these: it replays on the default stream but
    synchronises the capture stream, which waits for nothing, so its loop never waits for the
    GPU and the frames still queued when its clock stops are counted as done.
    """
    import torch

    from hetflow.model.subnet import Subnet
    from hetflow.platform.spec import ProcessingElement

    g = onnx_model.graph
    inits = {t.name for t in g.initializer}
    subnet = Subnet(name=g.name or "model", layers=tuple(n.name for n in g.node),
                    model=onnx_model, inputs=[i.name for i in g.input if i.name not in inits],
                    outputs=[o.name for o in g.output])
    element = ProcessingElement(name=f"gpu{device_index}", kind="gpu", cores=(),
                                device_index=device_index)
    runner = TorchCudaBackend().prepare(subnet, element, cuda_graph=True)
    try:
        if runner.mode != "cuda_graph":
            raise BackendError(f"{NAME}: {subnet.name} could not be captured as a CUDA graph: "
                               f"{runner.fallback_reason}")
        rng = np.random.default_rng(0)
        feeds = {n: rng.standard_normal(h, dtype=np.float32)
                 for n, h in zip(runner.inputs, runner.input_shapes)}
        graph_fps, graph_ms = timed_loop(runner.replay, seconds)
        run_fps, run_ms = timed_loop(lambda: runner.run(feeds), seconds)
        async_fps = back_to_back_fps(lambda: runner.replay(sync=False), runner.synchronize,
                                     seconds)
    finally:
        runner.close()
    return {"graph_fps": graph_fps, "graph_ms": graph_ms, "run_fps": run_fps, "run_ms": run_ms,
            "graph_async_fps": async_fps, "device": torch.cuda.get_device_name(device_index)}
