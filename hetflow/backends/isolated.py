"""An element whose runners live in a process of their own, driven through proxies.

Why: a GPU lane's firing is mostly a wait on the device; the rest is Python (staging inputs,
launching the graph, copying outputs) that needs the interpreter lock. Beside CPU stages that
fire thousands of times a second in the same process, each of those steps waits for the lock.
On the H100 machine the GPU stage of alexnet's pipeline fired 3,400-4,300 times a second with
its CPU stages firing in the same process, 5,600-5,800 with them in another process, and 6,800
alone; densenet121's 850-1,150 against 1,190-1,200 and 1,440 (`scripts/pipeline_gpu_probe.py`,
docs/results/lanes_h100/README.md). The device and the cores were the same in all three: what
the stages shared was the interpreter.

`IsolatedElement` spawns one child process for an element, builds the runners of its
sub-networks there (k lanes each, as `Backend.prepare_lanes` makes them), and serves each
(sub-network, lane) from its own thread over its own pipe. The engine gets `ProxyRunner`s: a
run sends the inputs down the pipe and waits for the outputs, and waiting releases the lock. A
frame still crosses this process's interpreter once per firing (the inputs pickled, the outputs
unpickled), but the lane's own Python work no longer queues behind the CPU stages.

Faults: a runner that raises in the child raises BackendError with its message here; a child
that dies (a crash, a kill) makes the waiting run raise BackendError naming the element and its
exit code, never a hang. Closing any proxy closes the process.
"""
from __future__ import annotations

import multiprocessing as mp
import signal
import threading
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Mapping

import numpy as np

from hetflow.errors import BackendError, first_line

if TYPE_CHECKING:
    from hetflow.model.subnet import Subnet
    from hetflow.platform.spec import ProcessingElement

READY_TIMEOUT = 600.0  # s: importing the backend, loading and capturing in the child


def _serve(runner, conn: Connection, cores) -> None:
    from hetflow.backends import pin_current_thread

    pin_current_thread(cores)
    while True:
        try:
            feeds = conn.recv()
        except (EOFError, OSError):  # the parent went away
            return
        if feeds is None:
            return
        try:
            out = ("ok", runner.run(feeds))
        except Exception as e:  # noqa: BLE001 - the parent raises it, naming the element
            out = ("error", f"{type(e).__name__}: {first_line(e)}")
        try:
            conn.send(out)
        except (BrokenPipeError, OSError):
            return


def _host_main(element: "ProcessingElement", subnets: list["Subnet"], lanes: int,
               conns: list[list[Connection]], status: Connection) -> None:
    """The child: build every (sub-network, lane) runner, say ready, serve until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    runners: list = []
    try:
        from hetflow.backends import backend_for, caller_cores_of, pin_current_thread

        pin_current_thread(element.cores)
        backend = backend_for(element)
        for sub in subnets:
            runners.append(backend.prepare_lanes(sub, element, lanes) if lanes > 1
                           else [backend.prepare(sub, element)])
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
        status.send(("error", f"{type(e).__name__}: {first_line(e)}"))
        for rs in runners:
            for r in rs:
                r.close()
        return
    threads = [threading.Thread(target=_serve, daemon=True,
                                args=(r, c, caller_cores_of([r], element)))
               for rs, cs in zip(runners, conns) for r, c in zip(rs, cs)]
    for t in threads:
        t.start()
    status.send(("ready", None))
    for t in threads:
        t.join()
    for rs in runners:
        for r in rs:
            r.close()


class IsolatedElement:
    """`element` running `subnets` (k `lanes` each) in a spawned process of its own;
    `runners[i][lane]` are the proxies the engine calls."""

    def __init__(self, element: "ProcessingElement", subnets: list["Subnet"], lanes: int = 1,
                 ready_timeout: float = READY_TIMEOUT):
        self.element = element
        lanes = max(1, lanes)
        ctx = mp.get_context("spawn")  # CUDA in a child needs a fresh interpreter
        pipes = [[ctx.Pipe() for _ in range(lanes)] for _ in subnets]
        status, child_status = ctx.Pipe(duplex=False)
        self.process = ctx.Process(
            target=_host_main, name=f"hetflow-{element.name}", daemon=True,
            args=(element, subnets, lanes, [[c for _, c in row] for row in pipes], child_status))
        self._lock = threading.Lock()
        self._closed = False
        self.process.start()
        child_status.close()  # so a dead child reads as EOF here, not as silence
        for row in pipes:
            for _, c in row:
                c.close()
        self.runners = [[ProxyRunner(self, sub, p, lane) for lane, (p, _) in enumerate(row)]
                        for sub, row in zip(subnets, pipes)]
        try:
            self._wait_ready(status, ready_timeout)
        except BaseException:
            self.close()
            raise
        finally:
            status.close()

    def _wait_ready(self, status: Connection, timeout: float) -> None:
        name = self.element.name
        if not status.poll(timeout):
            raise BackendError(f"element {name}: its process was not ready after "
                               f"{timeout:.0f} s")
        try:
            kind, body = status.recv()
        except EOFError:
            self.process.join(5)
            raise BackendError(f"element {name}: its process ended while loading "
                               f"(exit code {self.process.exitcode})") from None
        if kind == "error":
            raise BackendError(f"element {name} (in its own process): {body}")

    def died(self) -> BackendError:
        self.process.join(1.0)
        code = self.process.exitcode
        return BackendError(f"element {self.element.name}: its process ended"
                            + (f" (exit code {code})" if code is not None else ""))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for rs in getattr(self, "runners", ()):
            for r in rs:
                r.hang_up()
        self.process.join(5.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(2.0)


class ProxyRunner:
    """One (sub-network, lane) of an isolated element, as the engine sees a runner."""

    def __init__(self, host: IsolatedElement, subnet: "Subnet", conn: Connection, lane: int):
        self.host, self.conn, self.lane = host, conn, lane
        self.subnet = subnet
        self.element = host.element
        self.inputs, self.outputs = list(subnet.inputs), list(subnet.outputs)
        self.mode = "isolated"
        self._io = threading.Lock()  # one firing at a time on this pipe

    @property
    def caller_cores(self) -> tuple[int, ...]:
        return self.element.cores[:1]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            args = {k: feeds[k] for k in self.inputs}
        except KeyError as e:
            raise BackendError(f"sub-network {self.subnet.name} on {self.element.name}: input "
                               f"{e.args[0]!r} was not given (needs {self.inputs})") from None
        with self._io:
            try:
                self.conn.send(args)
                kind, body = self.conn.recv()
            except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
                raise self.host.died() from None
        if kind == "error":
            raise BackendError(body)
        return body

    def hang_up(self) -> None:
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.conn.close()

    def close(self) -> None:
        self.host.close()

