"""Host staging of a batch's frames on more than one core.

A batched GPU firing first copies its b frames into the lane's pinned host buffer. That copy
is plain memory traffic, about 50 us per 224 x 224 float32 frame on the GPU machine's cores,
and one driving thread doing it alone caps a GPU element near 20,000 frames/s whatever the
device could do: resnet18 at fp16, 4 lanes of 16, ran 15,500 frames/s staged by its driving
thread, 21,700 with two helper threads, 22,900 with no staging at all (H200). NumPy releases
the GIL while it copies, so threads on other cores copy in parallel.

A `Stager` splits a firing's rows between the calling (driving) thread and helper threads
pinned to the GPU element's other cores (`ProcessingElement.cores[1:]`, the platform's
`staging_cores`); the call returns once every row is staged. The lanes of one element share
one stager.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from hetflow.backends.affinity import pin_current_thread

MIN_ROWS = 4  # rows a thread stages at least: each hand-off wakes a sleeping thread, which on
# the GPU machine (a virtual machine) is now and then late by a millisecond; a b8 firing of
# alexnet (3,000 a second) split three ways ran slower than split two ways


def row_chunks(rows: int, stagers: int) -> list[tuple[int, int]]:
    """[start, end) row ranges, one per thread that stages: as even as rows allow, none
    shorter than MIN_ROWS unless there is only one."""
    n = max(1, min(stagers, rows // MIN_ROWS))
    cuts = [rows * i // n for i in range(n + 1)]
    return [(a, b) for a, b in zip(cuts, cuts[1:])]


class Stager:
    """Stage rows [0, rows) with `stage_rows(start, end)`: the caller stages the first
    chunk, helper threads on `cores` the others (see the module notes)."""

    def __init__(self, cores: Sequence[int]):
        self.cores = tuple(cores)
        self._users = 0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(
            max_workers=len(self.cores), thread_name_prefix="hetflow-stage",
            initializer=pin_current_thread, initargs=(self.cores,)) if self.cores else None

    def attach(self) -> "Stager":
        """One more user (a lane); `release` by each closes the helpers after the last."""
        with self._lock:
            self._users += 1
        return self

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users <= 0
        if last and self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def stage(self, rows: int, stage_rows: Callable[[int, int], None]) -> None:
        pool = self._pool
        chunks = row_chunks(rows, 1 + len(self.cores)) if pool is not None else [(0, rows)]
        helped = [pool.submit(stage_rows, a, b) for a, b in chunks[1:]]
        errors: list[BaseException] = []
        try:
            stage_rows(*chunks[0])
        except BaseException as e:
            errors.append(e)
        for f in helped:  # every helper done before the run launches, or its error raised
            try:
                f.result()
            except BaseException as e:
                errors.append(e)
        if errors:
            raise errors[0]
