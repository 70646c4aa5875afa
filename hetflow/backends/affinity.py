"""Pin threads to cores (Linux). ONNX Runtime pins its own pool threads; the caller pins itself."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterable, Iterator


def pin_current_thread(cores: Iterable[int]) -> None:
    """Restrict the calling thread (not the whole process) to `cores`.

    On Linux sched_setaffinity(0, ...) acts on the calling thread only. No-op where the OS has no
    affinity call (macOS): timings are then less stable, not wrong.
    """
    cores = set(cores)
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)


def current_affinity() -> set[int]:
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()


@contextmanager
def pinned(cores: Iterable[int]) -> Iterator[None]:
    """Pin the calling thread to `cores` for the duration of the block, then restore it."""
    before = current_affinity()
    pin_current_thread(cores)
    try:
        yield
    finally:
        if before:
            pin_current_thread(before)


def control_cores(elements: Iterable) -> set[int]:
    """Cores for the runtime's own threads (frame sources, the output collector, an element
    process's message and progress threads, the parent that watches): ones no element uses
    first, then GPU driver cores, never a CPU element's. A woken control thread must not
    preempt a CPU stage's ONNX Runtime pool thread (a parallel layer waits for its slowest
    thread; measured on the GPU machine with several CNNs at once), nor a GPU driver that
    polls its runs every fraction of a millisecond where a free core exists. Empty (leave the
    threads unpinned) when every core computes."""
    elements = list(elements)
    allowed = current_affinity()
    used = {c for e in elements for c in e.cores}
    cpu = {c for e in elements if e.kind == "cpu" for c in e.cores}
    if allowed and allowed - used:
        return allowed - used
    drivers = used - cpu
    return (drivers & allowed) if allowed else drivers


def caller_cores_of(runners: Iterable, element) -> set[int]:
    """Where the thread that calls `runners` should run: their caller cores (ONNX Runtime's
    pool threads are pinned to the element's other cores, and the profiler times layers with
    the caller there too), else the element's cores."""
    cores: set[int] = set()
    for r in runners:
        cores |= set(getattr(r, "caller_cores", ()) or ())
    return cores or set(element.cores)


@contextmanager
def realtime_process(priority: int = 10) -> Iterator[bool]:
    """Every thread of this process (ONNX Runtime's pool threads and CUDA's included) under
    the SCHED_FIFO real-time policy for the block, so that no ordinary process on the same
    cores preempts a firing; yields whether that was allowed (it needs root or
    CAP_SYS_NICE; without it nothing changes). Only for threads pinned to cores of their own:
    a real-time thread that spins starves the ordinary ones on its core (the kernel keeps 5%
    of each second for them)."""
    if not hasattr(os, "sched_setscheduler"):
        yield False
        return
    tids = [int(t) for t in os.listdir("/proc/self/task")]
    done: list[int] = []
    ended = 0
    try:
        for tid in tids:
            try:
                os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
                done.append(tid)
            except ProcessLookupError:  # a thread that ended meanwhile
                ended += 1
    except PermissionError:
        pass
    try:
        yield bool(done) and len(done) + ended == len(tids)
    finally:
        for tid in done:
            try:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            except (ProcessLookupError, PermissionError):
                pass
