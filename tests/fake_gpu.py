"""A stand-in GPU backend for machines without CUDA: ONNX Runtime on the element's driving
core, registered for GPU elements, so lanes run through the real engine, baselines and
profiler in CI. `SLOW` seconds of sleep per run (the GIL released, as a device wait releases
it) make several lanes overlap measurably; `IN_FLIGHT` records the most runs at once, `ASKED`
how often a driver asked whether a run was done. Like a
device's runner it launches runs without waiting (`submit`: the run goes to a thread of the
runner's own, its "stream"), so one thread can keep several lanes busy.
Batches: `prepare(..., batch=b)` wraps a batch-b ONNX Runtime runner (the real model's outputs,
padding included), and a firing sleeps t(b) = SLOW * (A + (1 - A) * b): A is the share of a
frame's time that a batch pays once (`reset(slow, a=...)`). `cpu(name, core, seconds)`: a
stand-in CPU copy on the same backend that sleeps `seconds` a frame (`SLOW_OF`), so a group of
a batched device and CPU copies runs at rates a test can predict."""
from __future__ import annotations

import concurrent.futures
import queue
import threading
import time

from hetflow.backends import Backend, get_backend, register_backend, registered_backends
from hetflow.platform.spec import ProcessingElement

NAME = "fake_gpu"
SLOW = 0.0
A = 0.0  # the fixed share of a firing's time: t(b) = SLOW * (A + (1 - A) * b)
SLOW_OF: dict[str, float] = {}  # element -> seconds a frame, in place of SLOW (`cpu`)
IN_FLIGHT = {"now": 0, "max": 0}
ASKED = {"finished": 0}  # how often a driver asked whether a run was done
_lock = threading.Lock()


class _Runner:
    def __init__(self, inner, element: str):
        self.inner, self.inputs, self.outputs = inner, inner.inputs, inner.outputs
        self.batch, self.element = inner.batch, element
        self._pending = None
        self._queue = queue.SimpleQueue()
        threading.Thread(target=self._stream, daemon=True).start()

    @property
    def caller_cores(self):
        return self.inner.caller_cores

    def submit(self, feeds):
        self._launch(self.run, dict(feeds))

    def submit_frames(self, frames):
        self._launch(self.run_frames, [dict(f) for f in frames])

    def _launch(self, run, work):
        if self._pending is not None:
            raise RuntimeError("fake_gpu: a run is already in flight on this lane")
        self._pending = concurrent.futures.Future()
        self._queue.put((run, work, self._pending))

    def finished(self):
        ASKED["finished"] += 1
        return self._pending is not None and self._pending.done()

    def wait(self):
        concurrent.futures.wait([self._pending])

    def collect(self):
        pending, self._pending = self._pending, None
        return pending.result()

    collect_frames = collect

    def _stream(self):
        while (job := self._queue.get()) is not None:
            run, work, result = job
            try:
                result.set_result(run(work))
            except BaseException as e:  # noqa: BLE001 - given back by collect
                result.set_exception(e)

    def run(self, feeds):
        return self._fire(self.inner.run, feeds)

    def run_frames(self, frames):
        return self._fire(self.inner.run_frames, frames)

    def _fire(self, run, work):
        with _lock:
            IN_FLIGHT["now"] += 1
            IN_FLIGHT["max"] = max(IN_FLIGHT["max"], IN_FLIGHT["now"])
        try:
            if self.element in SLOW_OF:
                time.sleep(SLOW_OF[self.element] * len(work) if isinstance(work, list)
                           else SLOW_OF[self.element])
            elif SLOW:
                time.sleep(firing_seconds(self.batch))
            return run(work)
        finally:
            with _lock:
                IN_FLIGHT["now"] -= 1

    def close(self):
        self._queue.put(None)
        self.inner.close()


class FakeGpuBackend(Backend):
    name = NAME
    kinds = ("gpu", "cpu")

    def prepare(self, subnet, element, batch=1, **opts):
        cpu = ProcessingElement(element.name, "cpu", element.cores)
        return _Runner(get_backend("ort_cpu").prepare(subnet, cpu, batch=batch), element.name)


def firing_seconds(batch: int) -> float:
    """The sleep of one firing of `batch` frames."""
    return SLOW * (A + (1 - A) * batch)


def gpu(name: str = "gpu0", core: int = 0) -> ProcessingElement:
    if NAME not in registered_backends():
        register_backend(NAME, FakeGpuBackend)
    return ProcessingElement(name, "gpu", (core,), device_index=0, backend=NAME, model="fake")


def cpu(name: str, core: int, seconds: float) -> ProcessingElement:
    """A CPU copy that sleeps `seconds` a frame (until `reset`), on its own core's cluster."""
    if NAME not in registered_backends():
        register_backend(NAME, FakeGpuBackend)
    SLOW_OF[name] = seconds
    return ProcessingElement(name, "cpu", (core,), cluster=f"fake-{name}", backend=NAME)


def reset(slow: float = 0.0, a: float = 0.0) -> None:
    """`slow`: seconds a frame's firing sleeps at batch 1; `a`: the share of it a batch pays
    once (0: a batch of b takes b times as long; 1: as long as one frame)."""
    global SLOW, A
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"fake_gpu: a={a} is outside [0, 1]")
    SLOW, A = slow, a
    SLOW_OF.clear()
    IN_FLIGHT.update(now=0, max=0)
    ASKED.update(finished=0)
