"""Run one worker thread per element at once: each prepares (pins itself, warms up), all start
together, and each steps until told to stop. The parallel baseline and the timing of a plan's
stages under load both measure this way."""
from __future__ import annotations

import threading
import time
from typing import Callable, Iterable, NamedTuple

from hetflow import interrupt
from hetflow.errors import RuntimeFault


class Window(NamedTuple):
    """When the workers started together, and when they were told to stop (perf_counter);
    `stop` is None where they ran until `step` said so."""
    start: float
    stop: float | None


def frames_in_window(spans: Iterable[tuple[float, float]], start: float, stop: float) -> float:
    """Frames of `spans` ((begin, end) of each) done inside [start, stop]: a frame under way at
    `stop` counts by its share inside. Counting it whole and dividing by the time its end came
    instead charges the copies of a slow CNN (vgg19 on one core: half a second a frame) for
    the tail their last frames add while the fast ones have stopped: the parallel baseline
    measured 0.55x the GPU alone that way in a half-second window."""
    n = 0.0
    for b, e in spans:
        if e <= stop:
            n += 1.0
        elif b < stop:
            n += (stop - max(b, start)) / (e - b)
    return n


def run_together(what: str, names: list[str], prepare: Callable[[int], None],
                 step: Callable[[int], bool], done: Callable[[float], bool] | None = None,
                 poll: float = 0.02) -> Window:
    """Threads for elements `names`: `prepare(i)`, then (all at once) `step(i)` until it
    returns False, `done(seconds since the start)` is true, or a thread failed. Returns the
    window they ran in; raises RuntimeFault "`what`: element X: error" for the first
    element that failed."""
    errors: list[str] = []
    started: list[float] = []
    # the start is taken as the barrier opens, before any worker steps: taken after, by this
    # thread, it came after every frame of a short run on a busy machine (a negative rate)
    barrier = threading.Barrier(len(names) + 1, action=lambda: started.append(time.perf_counter()))
    stop = threading.Event()

    def worker(i: int) -> None:
        try:
            prepare(i)
        except BaseException as e:
            errors.append(f"element {names[i]}: {type(e).__name__}: {e}")
        try:
            barrier.wait()
        except threading.BrokenBarrierError:  # the window was given up before it opened
            return
        try:
            while not stop.is_set() and not errors and step(i):
                pass
        except BaseException as e:
            errors.append(f"element {names[i]}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(names))]
    for t in threads:
        t.start()
    try:
        barrier.wait()
        t_start, t_stop = started[0], None
        if done is not None:
            while not errors and not done(time.perf_counter() - t_start):
                interrupt.check()
                time.sleep(poll)
            t_stop = time.perf_counter()
            stop.set()
        for t in threads:
            t.join()
    finally:  # a signal: the workers stop and are joined before it goes on (a thread left in
        stop.set()  # a native run while the interpreter finalises aborts the process)
        barrier.abort()
        for t in threads:
            t.join()
    if errors:
        raise RuntimeFault(f"{what}: {errors[0]}")
    return Window(t_start, t_stop)
