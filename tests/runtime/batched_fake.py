"""A batched stand-in device until the backends build batched runners (`runners_for(...,
batch=b)`): `install(monkeypatch)` makes the engine's batched runners wrap the real runners of
the element (ONNX Runtime, or tests/fake_gpu's), so each frame's outputs are the real model's.
A firing of up to b frames takes t1 * (a + (1 - a) * b) seconds whatever its frame count (a
partial batch is padded to b), and the frame counts of the firings are recorded."""
from __future__ import annotations

import concurrent.futures
import queue
import threading
import time

import hetflow.runtime.engine as engine
from hetflow.backends.reuse import runners_for

T1, A = 0.0, 0.5  # seconds of a one-frame firing, and the share of it a batch does not grow
FIRINGS: list[tuple[str, int, float]] = []  # (runner's name, frames, when it started)
_lock = threading.Lock()


class BatchedRunner:
    def __init__(self, inner, batch: int, name: str):
        self.inner, self.batch, self.name = inner, batch, name
        self.inputs, self.outputs = inner.inputs, inner.outputs
        self._pending = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._stream, daemon=True).start()

    @property
    def caller_cores(self):
        return self.inner.caller_cores

    def run_frames(self, frames):
        if not 1 <= len(frames) <= self.batch:
            raise ValueError(f"{self.name}: {len(frames)} frames for a batch of {self.batch}")
        with _lock:
            FIRINGS.append((self.name, len(frames), time.perf_counter()))
        if T1:
            time.sleep(T1 * (A + (1 - A) * self.batch))
        return [self.inner.run(f) for f in frames]

    def run(self, feeds):
        return self.run_frames([feeds])[0]

    def submit_frames(self, frames):
        if self._pending is not None:
            raise RuntimeError(f"{self.name}: a run is already in flight on this lane")
        self._pending = concurrent.futures.Future()
        self._queue.put((list(frames), self._pending))

    submit = None  # set below: `launches` looks for it

    def finished(self):
        return self._pending is not None and self._pending.done()

    def wait(self):
        concurrent.futures.wait([self._pending])

    def collect_frames(self):
        pending, self._pending = self._pending, None
        return pending.result()

    def _stream(self):
        while (job := self._queue.get()) is not None:
            frames, result = job
            try:
                result.set_result(self.run_frames(frames))
            except BaseException as e:  # noqa: BLE001 - given back by collect_frames
                result.set_exception(e)

    def close(self):
        self._queue.put(None)
        self.inner.close()


BatchedRunner.submit = BatchedRunner.submit_frames


def batched_runners_for(graph, layers, element, lanes=1, name=None, batch=1):
    inner = runners_for(graph, layers, element, lanes, name)
    return [BatchedRunner(r, batch, f"{element.name}/{name}") for r in inner]


def install(monkeypatch, t1: float = 0.0, a: float = 0.5) -> list[tuple[str, int, float]]:
    global T1, A
    T1, A = t1, a
    FIRINGS.clear()
    monkeypatch.setattr(engine, "runners_for", batched_runners_for)
    return FIRINGS
