"""Run one worker thread per element at once: each prepares (pins itself, warms up), all start
together, and each steps until told to stop. The parallel baseline and the timing of a plan's
stages under load both measure this way."""
from __future__ import annotations

import threading
import time
from typing import Callable

from hetflow.errors import RuntimeFault


def run_together(what: str, names: list[str], prepare: Callable[[int], None],
                 step: Callable[[int], bool], done: Callable[[float], bool] | None = None,
                 poll: float = 0.02) -> float:
    """Threads for elements `names`: `prepare(i)`, then (all at once) `step(i)` until it
    returns False, `done(seconds since the start)` is true, or a thread failed. Returns the
    start time (perf_counter); raises RuntimeFault "`what`: element X: error" for the first
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
        barrier.wait()
        try:
            while not stop.is_set() and not errors and step(i):
                pass
        except BaseException as e:
            errors.append(f"element {names[i]}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(names))]
    for t in threads:
        t.start()
    barrier.wait()
    t_start = started[0]
    if done is not None:
        while not errors and not done(time.perf_counter() - t_start):
            time.sleep(poll)
        stop.set()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeFault(f"{what}: {errors[0]}")
    return t_start
