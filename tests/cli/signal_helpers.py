"""Running `hetflow` as a user's shell does, in a subprocess, and signalling it once a line on
its stderr says a step began."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
# a signal must end the command within 2 s; the slack is for a loaded 2-core CI machine
BOUND_S = 3.0


def strict_json(text: str):
    """json.loads refusing NaN and Infinity, as strict parsers (RFC 8259) do."""
    def refuse(name: str):
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


class Hetflow:
    """`python -m hetflow ARGS` with stderr read line by line as it comes."""

    def __init__(self, *args: str, cwd: Path, cache: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HETFLOW_CACHE": str(cache),
               "COLUMNS": "200"}
        self.proc = subprocess.Popen([sys.executable, "-m", "hetflow", *map(str, args)],
                                     cwd=cwd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        self.out = ""
        self._new = threading.Condition()
        self._readers = [threading.Thread(target=self._read_err, daemon=True),
                         threading.Thread(target=self._read_out, daemon=True)]
        for t in self._readers:
            t.start()

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            with self._new:
                self.err.append(line)
                self._new.notify_all()

    def _read_out(self) -> None:
        self.out = self.proc.stdout.read()

    def wait_for(self, pattern: str, timeout: float = 60.0) -> str:
        """The first stderr line matching `pattern`; fails if the process ends first."""
        rx, deadline = re.compile(pattern), time.monotonic() + timeout
        with self._new:
            while True:
                hit = next((line for line in self.err if rx.search(line)), None)
                if hit:
                    return hit
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"no stderr line matched {pattern!r} (exit "
                                         f"{self.proc.poll()}):\n{''.join(self.err)}")
                self._new.wait(0.1)

    def children(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self, sig: int) -> tuple[int, float]:
        """Send `sig`; (exit code, seconds until the process ended)."""
        t0 = time.monotonic()
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"{signal.Signals(sig).name} did not end it within 30 s:\n"
                                 + "".join(self.err))
        took = time.monotonic() - t0
        for t in self._readers:
            t.join(5)
        return code, took

    def finish(self, timeout: float = 120) -> int:
        code = self.proc.wait(timeout=timeout)
        for t in self._readers:
            t.join(5)
        return code

    def stderr(self) -> str:
        return "".join(self.err)


def assert_stopped(h: Hetflow, sig: int, children: list[psutil.Process] = ()) -> float:
    """Signal `h`; assert it exited with 128 + sig within BOUND_S, said so in one line, did not
    abort, and left none of `children` running. Returns the seconds it took."""
    code, took = h.stop(sig)
    err = h.stderr()
    assert code == 128 + sig, f"exit {code}:\n{err}"
    assert took < BOUND_S, f"{took:.1f} s to stop:\n{err}"
    assert f"hetflow: interrupted ({signal.Signals(sig).name})" in err
    assert "Traceback" not in err and "terminate called" not in err
    time.sleep(0.2)
    alive = [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"child processes left running: {alive}"
    return took
