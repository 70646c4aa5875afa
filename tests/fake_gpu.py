"""A stand-in GPU backend for machines without CUDA: ONNX Runtime on the element's driving
core, registered for GPU elements, so lanes run through the real engine, baselines and
profiler in CI. `SLOW` seconds of sleep per run (the GIL released, as a device wait releases
it) make several lanes overlap measurably; `IN_FLIGHT` records the most runs at once, `ASKED`
how often a driver asked whether a run was done. Like a
device's runner it launches runs without waiting (`submit`: the run goes to a thread of the
runner's own, its "stream"), so one thread can keep several lanes busy."""
from __future__ import annotations

import concurrent.futures
import queue
import threading
import time

from hetflow.backends import Backend, get_backend, register_backend, registered_backends
from hetflow.platform.spec import ProcessingElement

NAME = "fake_gpu"
SLOW = 0.0
IN_FLIGHT = {"now": 0, "max": 0}
ASKED = {"finished": 0}  # how often a driver asked whether a run was done
_lock = threading.Lock()


class _Runner:
    def __init__(self, inner):
        self.inner, self.inputs, self.outputs = inner, inner.inputs, inner.outputs
        self._pending = None
        self._queue = queue.SimpleQueue()
        threading.Thread(target=self._stream, daemon=True).start()

    @property
    def caller_cores(self):
        return self.inner.caller_cores

    def submit(self, feeds):
        if self._pending is not None:
            raise RuntimeError("fake_gpu: a run is already in flight on this lane")
        self._pending = concurrent.futures.Future()
        self._queue.put((dict(feeds), self._pending))

    def finished(self):
        ASKED["finished"] += 1
        return self._pending is not None and self._pending.done()

    def wait(self):
        concurrent.futures.wait([self._pending])

    def collect(self):
        pending, self._pending = self._pending, None
        return pending.result()

    def _stream(self):
        while (job := self._queue.get()) is not None:
            feeds, result = job
            try:
                result.set_result(self.run(feeds))
            except BaseException as e:  # noqa: BLE001 - given back by collect
                result.set_exception(e)

    def run(self, feeds):
        with _lock:
            IN_FLIGHT["now"] += 1
            IN_FLIGHT["max"] = max(IN_FLIGHT["max"], IN_FLIGHT["now"])
        try:
            if SLOW:
                time.sleep(SLOW)
            return self.inner.run(feeds)
        finally:
            with _lock:
                IN_FLIGHT["now"] -= 1

    def close(self):
        self._queue.put(None)
        self.inner.close()


class FakeGpuBackend(Backend):
    name = NAME
    kinds = ("gpu",)

    def prepare(self, subnet, element, **opts):
        cpu = ProcessingElement(element.name, "cpu", element.cores)
        return _Runner(get_backend("ort_cpu").prepare(subnet, cpu))


def gpu(name: str = "gpu0", core: int = 0) -> ProcessingElement:
    if NAME not in registered_backends():
        register_backend(NAME, FakeGpuBackend)
    return ProcessingElement(name, "gpu", (core,), device_index=0, backend=NAME, model="fake")


def reset(slow: float = 0.0) -> None:
    global SLOW
    SLOW = slow
    IN_FLIGHT.update(now=0, max=0)
    ASKED.update(finished=0)
