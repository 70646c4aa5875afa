"""hetflow.interrupt: the first SIGINT or SIGTERM raises in the main thread and sets the stop
flag that later steps see; a second exits at once; leaving joins the threads first."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from hetflow import interrupt

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_raises_once_and_later_steps_see_it(sig):
    before = signal.getsignal(sig)
    with interrupt.handled():
        with pytest.raises(interrupt.Interrupted):
            signal.raise_signal(sig)
            time.sleep(5)  # not reached: the handler raised
        assert interrupt.requested()
        with pytest.raises(KeyboardInterrupt):  # the next step does not start
            interrupt.check()
        assert interrupt.exit_code() == 128 + sig
        assert interrupt.marker() == {"interrupted": True, "signal": signal.Signals(sig).name}
    assert signal.getsignal(sig) is before
    # what comes after in this process (another command, a test) runs as if no signal came
    assert not interrupt.requested() and interrupt.exit_code() == 130
    interrupt.check()
    assert interrupt.marker(False) == {"interrupted": False, "signal": None}


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=30, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_second_signal_exits_at_once_with_its_code():
    r = run_python("""
        import os, signal, time
        from hetflow import interrupt
        with interrupt.handled():
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
            except KeyboardInterrupt:
                pass
            os.kill(os.getpid(), signal.SIGTERM)  # while the results are written
            time.sleep(5)
            print("not reached")
    """)
    assert r.returncode == 143 and "not reached" not in r.stdout
    assert "hetflow: SIGTERM again, exiting now" in r.stderr


def test_leaving_joins_the_threads_and_runs_the_atexit_handlers():
    r = run_python("""
        import atexit, os, signal, threading, time
        from hetflow import interrupt
        atexit.register(lambda: print("atexit ran", flush=True))

        def worker():  # a loop that looks at the stop flag, as the engines' workers do
            while not interrupt.STOP.wait(0.01):
                pass
            time.sleep(0.2)
            print("worker stopped", flush=True)

        with interrupt.handled():
            threading.Thread(target=worker, daemon=True).start()
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except KeyboardInterrupt:
                interrupt.finish(interrupt.exit_code())
    """)
    assert r.returncode == 143, r.stderr
    assert r.stdout == "worker stopped\natexit ran\n"


def test_in_process_a_finish_is_a_system_exit():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    threading.Timer(0.1, stop.set).start()
    with pytest.raises(SystemExit) as e:
        interrupt.finish(143, at_once=False)
    assert e.value.code == 143 and not t.is_alive()
    interrupt.STOP.clear()  # (set by finish; handled() clears it for a command)


def test_threads_that_native_code_started_are_not_joined():
    """A dummy thread (native code's, seen by Python) cannot be joined; the others still are."""
    seen = []
    t = threading.Thread(target=lambda: seen.append(threading.current_thread()))
    t.start()
    t.join()
    dummy = threading._DummyThread.__new__(threading._DummyThread)  # never started: as native
    threading.Thread.__init__(dummy, name="native", daemon=True)
    dummy._started.set()
    threading._active[-1] = dummy  # listed by threading.enumerate, as a native thread is
    try:
        assert "native" not in interrupt.stop_threads(timeout=0.1)
    finally:
        del threading._active[-1]
        interrupt.STOP.clear()


def test_a_library_that_takes_sigterm_gives_it_back():
    """As Ray's init does: its own handler exits with SystemExit(15), writing nothing."""
    def library_init(signal_meanwhile: bool) -> None:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
        if signal_meanwhile:
            signal.raise_signal(signal.SIGTERM)

    with interrupt.handled():
        with interrupt.foreign_handlers():
            library_init(False)
        assert signal.getsignal(signal.SIGTERM) is interrupt._on_signal
        with pytest.raises(interrupt.Interrupted):
            with interrupt.foreign_handlers():
                library_init(True)
        assert interrupt.exit_code() == 143
        assert signal.getsignal(signal.SIGTERM) is interrupt._on_signal
