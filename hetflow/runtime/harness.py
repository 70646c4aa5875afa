"""What every engine does around its schedule: one stop signal, the first fault, a stall
watchdog and Ctrl-C, the same way for threads, processes and Ray workers.

An engine's supervising loop calls `supervise(step, ...)`: `step()` does the engine's own part
(release frames, read messages) and says how many frames are done, or None when the run is
complete. A fault reported by any worker (`Control.fail`) ends the loop with RuntimeFault naming
where it happened; no progress for `stall_timeout` seconds ends it with RuntimeFault naming what
each worker waits on; Ctrl-C ends it normally, marked incomplete, so that what was measured so
far is reported.
"""
from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import time
from typing import Any, Callable, Iterable, Mapping

from hetflow import interrupt
from hetflow.errors import RuntimeFault

POLL = 0.05  # s: how often a blocked worker looks at the stop signal
JOIN = 2.0  # s: how long the engine waits for a stopped worker
STALLED_JOIN = 0.5  # s: the same after a stall (a worker then waits at most 0.2 s at a time)


@contextlib.contextmanager
def frozen_heap(switch_interval: float | None = None):
    """Keep what exists before a run (models, sessions, graphs: millions of objects) out of the
    garbage collector's scans while it runs: a full collection over them holds the GIL for
    milliseconds and shows up as a latency spike in every worker. Blocks may nest or overlap
    (runs in several threads): the heap is frozen from the first entry to the last exit, and the
    switch interval of the outermost block holds. Every measured run takes it:
    the engine's and the baselines' copies alike (copies in a process holding 4.2 million
    objects ran 14-21% slower without it on the 2-core VM, alike with a small heap).
    `switch_interval` (or
    HETFLOW_SWITCH_INTERVAL, seconds): how long a thread that wants the GIL waits before the
    holder is asked to drop it; Python's 5 ms default lets one busy thread stall a worker
    whose frame is due (with several CNNs at once on the GPU machine, 0.1 ms cut the CPU
    elements' worst responses from 35-51 ms to 8-11 ms; docs/benchmarks.md)."""
    with _frozen_lock:
        _frozen[0] += 1
        if _frozen[0] == 1:
            gc.collect()
            gc.freeze()
            _frozen[1] = sys.getswitchinterval()
            interval = switch_interval or float(os.environ.get("HETFLOW_SWITCH_INTERVAL") or 0)
            if interval > 0:
                sys.setswitchinterval(interval)
    try:
        yield
    finally:
        with _frozen_lock:
            _frozen[0] -= 1
            if _frozen[0] == 0:
                sys.setswitchinterval(_frozen[1])
                gc.unfreeze()


_frozen_lock = threading.Lock()
_frozen: list = [0, 0.005]  # blocks inside frozen_heap now; the switch interval before them


class Stopped(Exception):
    """Raised inside a worker that was waiting when the run stopped."""


class Control:
    """The stop signal, the faults, and what each worker waits on (for a stall's message)."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.faults: list[str] = []
        self.waiting: dict[str, str] = {}  # worker -> what it waits on ("running" when not)
        self.stalled = False  # set by the stall watchdog

    def fail(self, message: str) -> None:
        self.faults.append(message)
        self.stop.set()

    def raise_fault(self) -> None:
        if self.faults:
            raise RuntimeFault(self.faults[0])

    def waits(self) -> str:
        return "; ".join(f"{w} waits on {what}" for w, what in sorted(self.waiting.items())
                         if what != "running")


def fault_text(element: str, where: str, e: BaseException) -> str:
    """'element E, WHERE: Type: first line of the message' — how every engine names a fault."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"element {element}, {where}: {type(e).__name__}: {msg}"


def supervise(step: Callable[[], int | Mapping[str, int] | None], control: Control,
              stall_timeout: float, describe: Callable[[Any], str] | None = None) -> bool:
    """Call `step` until it returns None (the run is complete: True) or Ctrl-C (False). A fault
    or `stall_timeout` seconds without a new frame raises RuntimeFault, its message ending with
    `describe(what step returned)` (default: which frame, and what each worker waits on).
    `step` says the frames done, as one count or as a count per application still running:
    then each must progress (one application hung beside a live one is a stall too, or the
    live one would keep the run going for ever). `step` paces itself (it waits when there is
    nothing to do)."""
    seen: dict[str, int] = {}
    last: dict[str, float] = {}
    try:
        while True:
            done = step()
            if done is None:
                return True
            if interrupt.requested():  # a signal came while another run swallowed it
                return False
            control.raise_fault()
            now = time.perf_counter()
            counts = done if isinstance(done, Mapping) else {"": done}
            for key, n in counts.items():
                if seen.get(key) != n:
                    seen[key], last[key] = n, now
            stalled = sorted(k for k in counts if now - last[k] > stall_timeout)
            if stalled:
                why = (describe(done) if describe else
                       f"at frame {done}; {control.waits() or 'every element runs'}")
                by = f"by {', '.join(stalled)} " if isinstance(done, Mapping) else ""
                control.stalled = True
                raise RuntimeFault(f"stall: no frame completed for {stall_timeout:.0f} s "
                                   f"{by}{why}")
    except KeyboardInterrupt:
        return False


def stop_threads(control: Control, threads: Iterable[threading.Thread],
                 timeout: float = JOIN) -> None:
    """Signal the stop and wait for the workers (each looks at the signal every POLL). After a
    stall only briefly: a worker still in a stage has then been stuck in it for the whole stall
    timeout, and waiting for it would only delay the error."""
    control.stop.set()
    if control.stalled:
        timeout = min(timeout, STALLED_JOIN)
    deadline = time.perf_counter() + timeout
    for t in threads:
        if t.ident is not None:  # started
            t.join(timeout=max(0.0, deadline - time.perf_counter()))
