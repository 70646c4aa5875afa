"""One interrupt path for every command: SIGINT (Ctrl-C) and SIGTERM alike.

The first signal sets a process-wide stop flag (`STOP`) and raises `Interrupted`, a
KeyboardInterrupt, in the main thread, so the code that already ends a run early on Ctrl-C
(the engines' supervising loops, the baselines' windows) does so for SIGTERM too; loops that
swallow it and go on (a run returns what it measured) look at the flag at their next step
(`check()`), so no new step starts. The command then writes what it has, marked with
`marker()`, and leaves through `finish()`: worker threads are stopped and joined first (a
Python thread left inside ONNX Runtime or CUDA while the interpreter finalises aborts the
process), then the process exits with 128 + the signal number (130 for SIGINT, 143 for
SIGTERM) without the interpreter's slow teardown. A second signal exits at once with that
code.
"""
from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator, NoReturn

STOP = threading.Event()  # set by the first signal; every long loop may poll it
SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []  # the signal that set STOP
_active: list[bool] = []  # inside handled()


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal (a KeyboardInterrupt, so Ctrl-C's handlers apply)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _on_signal(signum: int, frame) -> None:
    if STOP.is_set():  # the second: the user will not wait for the results to be written
        os.write(2, f"hetflow: {signal.Signals(signum).name} again, exiting now\n".encode())
        os._exit(128 + signum)
    _received.append(signum)
    STOP.set()
    raise Interrupted(signum)


@contextmanager
def handled() -> Iterator[None]:
    """SIGINT and SIGTERM go through this module while the block runs (in the main thread;
    elsewhere signals cannot be handled and nothing changes); the handlers before it after.
    Each block starts and ends with no signal received (a command run again in one
    process: the flag set by one must not stop the next)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    STOP.clear()
    _received.clear()
    previous = {s: signal.signal(s, _on_signal) for s in SIGNALS}
    _active.append(True)
    try:
        yield
    finally:
        _active.pop()
        for s, h in previous.items():
            signal.signal(s, h)
        STOP.clear()
        _received.clear()


@contextmanager
def foreign_handlers() -> Iterator[None]:
    """Around a call that installs its own signal handlers (Ray's `init` takes SIGTERM and
    exits with SystemExit(15), writing nothing): ours are put back after it, and a SIGTERM its
    handler turned into SystemExit meanwhile is raised as Interrupted, as ours would have."""
    try:
        yield
    except SystemExit as e:
        if not _active or e.code != signal.SIGTERM:
            raise
        _received.append(signal.SIGTERM)
        STOP.set()
        raise Interrupted(signal.SIGTERM) from None
    finally:
        _take_back()


def _take_back() -> None:
    """Route the signals through this module again, where a `handled()` block runs (after a
    library put its own handlers in at the C level, as Ray's core worker does)."""
    if _active and threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, _on_signal)


def requested() -> bool:
    return STOP.is_set()


def check() -> None:
    """A safe point: raise Interrupted if a signal came (and was swallowed by a run that
    returned what it measured), so the next step does not start."""
    if STOP.is_set():
        raise Interrupted(_received[0] if _received else signal.SIGINT)


def signal_name() -> str | None:
    return signal.Signals(_received[0]).name if _received else None


def exit_code(default: int = 130) -> int:
    """128 + the signal's number (130 for SIGINT, 143 for SIGTERM); `default` without one."""
    return 128 + _received[0] if _received else default


def marker(interrupted: bool = True) -> dict:
    """What an output says of its completeness: {"interrupted": bool, "signal": name|None}."""
    return {"interrupted": bool(interrupted), "signal": signal_name() if interrupted else None}


def stop_threads(timeout: float = 1.5) -> list[str]:
    """Set the stop flag and join every other Python thread for up to `timeout` seconds in
    all; returns the names of those still running."""
    STOP.set()
    deadline = time.monotonic() + timeout
    me = threading.current_thread()
    # threads that native code started and that once called into Python (threading's dummy
    # threads) cannot be joined: they are not Python's to stop
    others = [t for t in threading.enumerate() if t is not me and t is not threading.main_thread()
              and not isinstance(t, threading._DummyThread)]
    for t in others:
        if t.is_alive():
            t.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in others if t.is_alive()]


def finish(code: int, at_once: bool = True) -> NoReturn:
    """Leave an interrupted command with `code`: stop and join the threads, run the atexit
    handlers, flush, and exit without the interpreter's teardown (`at_once`): that teardown
    took 1-2 s with torch and ONNX Runtime loaded, and aborts while a thread it could not stop
    is inside a native run. Not `at_once` (a caller in this process, a test): SystemExit once
    the threads had their time to stop; the caller's process is the caller's to end, whatever
    threads of its own it keeps (an idle thread pool must not end it)."""
    stop_threads()
    if not at_once:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
