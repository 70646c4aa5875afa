"""The supervision harness (`hetflow.runtime.harness`) through every engine: the single-CNN thread
engine (`run_plan`), the multi-CNN thread and process engines (`run_multiplan`) and the Ray
engine (`run_plan(engine="ray")`), each on a tiny two-stage plan, each put through the same
three things:

- a fault: a stage raises after some frames -> RuntimeFault naming the element and the stage,
  the run stopped within 2 s of the raise;
- a stall: a stage blocks -> RuntimeFault after the stall timeout naming what waits, as each
  engine does (the thread engine: the element waiting on the channel; the multi-CNN thread
  engine: what each element does; the process engine: each application's frames; Ray: the
  firing not finished), within stall timeout + 2 s of the block;
- Ctrl-C (SIGINT) during the run -> within 2 s, the report of what was measured, marked
  incomplete (a SIGINT whose action a library left at the default fails the test, rather
  than killing the session);

and after each, nothing left behind: no thread, no child process, no Ray worker of the run.

The fault and the block are a wrapper around the runners of the element that runs the first
stage (`breaker`), put in place where each engine builds its runners: `engine.prepare` in this process, the same inside every
element process (the process engine's entry point, wrapped, is pickled by reference to this
module, which the spawned child imports), and a call into the running Ray actor
(`__ray_call__`, the wrapper shipped by value). Each breaker writes the wall-clock time at which
it raised or blocked to a file, so every bound is measured from the injection, wherever it ran.
"""
from __future__ import annotations

import _thread
import functools
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from hetflow.errors import RuntimeFault
from hetflow.model.synthetic import random_cnn_graph

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "multi"))  # the multi helpers
from test_procs import on_files  # noqa: E402
from test_runtime import cpu_elements, graphs, plan_of, split, tiny_problem  # noqa: E402

from test_ray_engine import cluster  # noqa: E402,F401  (the local three-node Ray cluster)
from patching import patch_everywhere

ENGINES = ["thread", "multi-thread", "multi-process", "ray"]
STALL = 1.0  # s: the stall timeout every run is given
BOUND = 2.0  # s: the spec: a fault or Ctrl-C stops the run within this, a stall within STALL + it
GRACE = 10.0  # s: how long what a run started may take to be gone after it returned
AFTER = 20  # the call of the broken element's runners (in one process) that fails or blocks
GRAPH = random_cnn_graph(16, 2)


# ---- the injected fault or block ------------------------------------------------------------
def breaker(mode: str, after: int, marks: str, release: str):
    """A function that wraps a runner: at the `after`-th call (counted over every runner it
    wraps in one process) the wrapper writes the time to `marks`; from that call on it raises
    ValueError (mode "fault") or blocks until the file `release` exists (mode "hang").
    Self-contained (it imports what it uses), so that Ray ships it by value."""
    calls = [0]

    def wrap(runner):
        import os
        import time

        class Broken:
            def __getattr__(self, name):  # caller_cores, inputs, outputs, close
                return getattr(runner, name)

            def run(self, feeds):
                calls[0] += 1
                if calls[0] < after:
                    return runner.run(feeds)
                if calls[0] == after:
                    with open(marks, "a") as f:
                        f.write(f"{time.time()!r}\n")
                if mode == "fault":
                    raise ValueError("injected failure")
                deadline = time.time() + 120  # a test that forgets to release it ends anyway
                while not os.path.exists(release) and time.time() < deadline:
                    time.sleep(0.02)
                return runner.run(feeds)

        return Broken()

    return wrap


def wrap_prepare(monkeypatch, element: str, wrap) -> None:
    """`engine.prepare` (the runners of the thread engines) with `element`'s runners wrapped."""
    import hetflow.runtime.engine as engine

    real = engine.prepare

    def prepare(*a, **k):
        pp = real(*a, **k)
        for key in [key for key in pp.runners if key[0] == element]:
            pp.runners[key] = wrap(pp.runners[key])
        return pp

    patch_everywhere(monkeypatch, engine, "prepare", prepare)


def broken_element_main(element: str, spec: tuple, *args):
    """The process engine's element process with `element`'s runners wrapped by
    `breaker(*spec)`: what `procs.element_main` is replaced with in the parent, pickled by
    reference to this module (the spawned child imports it, on the parent's sys.path)."""
    import hetflow.multi.procs as procs

    wrap_prepare(pytest.MonkeyPatch(), element, breaker(*spec))  # (a process of its own)
    procs.element_main(*args)


# ---- each engine on a two-stage plan ----------------------------------------------------------
class Engine:
    """How to run one engine: `run(spec, on_running)` runs a plan of `frames` frames (about a
    minute of them: far longer than a test waits, yet a test whose run is not stopped fails
    instead of hanging) with the stages on element `broken` wrapped by `breaker(*spec)` (if
    given), and calls `on_running()` once the frames flow."""

    frames: int
    broken: str  # the element whose stages are broken (it runs the first stage)
    stage: str  # its stage, as a fault names it
    waits: str  # what a stall's message names (a regex)

    def __init__(self, request, monkeypatch, tmp_path):
        self.request, self.monkeypatch, self.tmp_path = request, monkeypatch, tmp_path

    def run(self, spec, on_running):
        raise NotImplementedError


class ThreadEngine(Engine):
    frames = 500_000  # about 20,000 a second on the 2-core VM
    broken = stage = "pe0"
    waits = r"at frame \d+; pe1 waits on channel \S+ \(from pe0\)"

    def run(self, spec, on_running):
        from hetflow.runtime.api import run_plan

        names = [l.name for l in GRAPH.layers]
        plan = self.request.getfixturevalue("plan_for")(
            GRAPH, {l: ("pe0" if i < 8 else "pe1") for i, l in enumerate(names)},
            policy="maximal")
        if spec:
            wrap_prepare(self.monkeypatch, "pe0", breaker(*spec))
        return run_plan(plan, GRAPH, frames=self.frames, warmup=0, check="none",
                        stall_timeout=STALL, on_frame=lambda f: on_running())


class MultiEngine(Engine):
    kind: str
    frames = 5000  # one per 10 and 12 ms

    def __init__(self, request, monkeypatch, tmp_path):
        super().__init__(request, monkeypatch, tmp_path)
        self.mp = tiny_problem(0.01, 0.012)
        self.e0, self.e1 = (e.name for e in cpu_elements())
        self.broken = self.stage = self.e0

    def mappings(self):
        """a: e0 -> e1, b: e1 -> e0: a block on e0 holds up both applications."""
        return [split(self.mp.apps[0], self.e0, self.e1), split(self.mp.apps[1], self.e1, self.e0)]

    def run(self, spec, on_running):
        from hetflow.multi.run import run_multiplan

        plan = on_files(plan_of(self.mp, self.mappings()), self.tmp_path)
        if spec:
            self.inject(spec)

        def progress(msg: str) -> None:
            if msg.startswith("running"):
                on_running()

        return run_multiplan(plan, graphs(self.mp), frames=self.frames, warmup=0, check="none",
                             max_in_flight=2, stall_timeout=STALL, progress=progress,
                             engine=self.kind)


class MultiThreadEngine(MultiEngine):
    kind = "threads"

    @property
    def waits(self):
        return (rf"by [ab](, b)? \({self.e0}: application \w, stage {self.e0} phase \d, "
                rf"frame \d+; {self.e1}: ")

    def inject(self, spec):
        wrap_prepare(self.monkeypatch, self.e0, breaker(*spec))


class MultiProcessEngine(MultiEngine):
    kind = "processes"
    @property
    def waits(self):
        return (rf"by [ab](, b)? \(a \d+/\d+, b \d+/\d+; {self.e0}: application \w, stage "
                rf"{self.e0} phase \d, frame \d+; {self.e1}: ")

    def inject(self, spec):
        import hetflow.multi.procs as procs

        self.monkeypatch.setattr(procs, "element_main",
                                 functools.partial(broken_element_main, self.e0, spec))


class RayEngine(Engine):
    frames = 10_000  # about 200 a second on the 2-core VM
    broken = stage = "n1:pe0"
    waits = r"at frame \d+; n1:pe0 \(node n1\) has not finished stage n1:pe0 phase 0"

    def __init__(self, request, monkeypatch, tmp_path):
        super().__init__(request, monkeypatch, tmp_path)
        request.getfixturevalue("cluster")  # started before the test looks at what runs

    def run(self, spec, on_running):
        import ray

        from hetflow.runtime.api import run_plan

        wrap = breaker(*spec) if spec else None
        names = [l.name for l in GRAPH.layers]
        plan = self.request.getfixturevalue("plan_for")(
            GRAPH, {l: ("n1:pe0" if i < 8 else "n2:pe1") for i, l in enumerate(names)},
            policy="maximal")

        def inject(worker):  # runs in the actor, after the frames submitted so far
            worker.runners[0] = wrap(worker.runners[0])

        def on_frame(f):
            if f == 3 and wrap:
                (name,) = [n for n in ray.util.list_named_actors()
                           if n.startswith("hetflow-n1:pe0-") and n not in earlier]
                ray.get_actor(name).__ray_call__.remote(inject)
            on_running()

        earlier = set(ray.util.list_named_actors())  # (this run's worker is a new one)
        return run_plan(plan, GRAPH, engine="ray", frames=self.frames, warmup=0, check="none",
                        stall_timeout=STALL, on_frame=on_frame)


KINDS = {"thread": ThreadEngine, "multi-thread": MultiThreadEngine,
         "multi-process": MultiProcessEngine, "ray": RayEngine}


@pytest.fixture(params=ENGINES)
def engine(request, monkeypatch, tmp_path):
    return KINDS[request.param](request, monkeypatch, tmp_path)


# ---- what a run may leave behind ----------------------------------------------------------------
def started_by_a_run(p: psutil.Process) -> str | None:
    """What `p` is, if a run started it: a Ray worker of a run, wherever in the tree; else a
    direct child (an element process) other than multiprocessing's resource tracker (one per
    interpreter, from its first semaphore on). (Ray starts and stops idle workers below its
    raylet at will.) None for any other, a zombie, or one gone meanwhile."""
    try:
        cmd = " ".join(p.cmdline())
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        if "ElementWorker" in cmd or (p.ppid() == os.getpid() and "resource_tracker" not in cmd):
            return f"process {p.pid} ({cmd[:60]})"
    except psutil.Error:
        pass
    return None


class Leftovers:
    """The threads and child processes before a run; `check()`: none of those the run started
    is still there after a short grace (a thread or process winds down after the call)."""

    def __init__(self):
        self.threads = set(threading.enumerate())
        self.children = {p.pid for p in psutil.Process().children(recursive=True)}

    def now(self) -> list[str]:
        # (a _DummyThread is a native thread that once called into Python, such as Ray's
        # logging of errors nobody asked for: never one an engine starts, and never removed)
        threads = [t for t in threading.enumerate() if t not in self.threads and t.is_alive()
                   and not isinstance(t, threading._DummyThread)]
        procs = [started_by_a_run(p) for p in psutil.Process().children(recursive=True)
                 if p.pid not in self.children]
        return [f"thread {t.name} (daemon={t.daemon})" for t in threads] + [p for p in procs if p]

    def check(self) -> None:
        deadline = time.monotonic() + GRACE
        while (left := self.now()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, f"left behind: {left}"


def sigint_reaches_python() -> bool:
    """Whether a SIGINT now would reach Python's handler: a C library can replace it behind
    Python's back (signal.getsignal still names Python's), as CP-SAT did when it left the
    default action (kill the process) after a solve."""
    status = Path("/proc/self/status")
    if not status.exists():
        return signal.getsignal(signal.SIGINT) is signal.default_int_handler
    caught = next(l for l in status.read_text().splitlines() if l.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (signal.SIGINT - 1) & 1)


def injected_at(marks: Path) -> float:
    assert marks.exists(), "the breaker never ran"
    return float(marks.read_text().split()[0])


# ---- the three behaviours -------------------------------------------------------------------------
def test_a_fault_stops_the_run_naming_element_and_stage(engine, tmp_path):
    marks = tmp_path / "marks"
    before = Leftovers()
    with pytest.raises(RuntimeFault) as err:
        engine.run(("fault", AFTER, str(marks), str(tmp_path / "release")), lambda: None)
    stopped = time.time()
    msg = str(err.value)
    assert msg.startswith(f"element {engine.broken}") and f"stage {engine.stage} phase" in msg \
        and msg.endswith("ValueError: injected failure"), msg
    assert stopped - injected_at(marks) < BOUND, msg
    before.check()


def test_a_stall_names_what_waits_after_the_stall_timeout(engine, tmp_path):
    marks, release = tmp_path / "marks", tmp_path / "release"
    before = Leftovers()
    try:
        with pytest.raises(RuntimeFault, match=rf"^stall: no frame completed for 1 s "
                                               rf"{engine.waits}") as err:
            engine.run(("hang", AFTER, str(marks), str(release)), lambda: None)
        stopped = time.time()
        # (a frame or two in flight may still complete after the block: hence the 0.3 s)
        assert STALL - 0.3 < stopped - injected_at(marks) < STALL + BOUND, str(err.value)
    finally:
        release.touch()  # a thread blocked in the stage may go now; a process was stopped
    before.check()


@pytest.mark.parametrize("kind", ["multi-thread", "multi-process"])
def test_one_application_hung_beside_a_live_one_is_a_stall(kind, request, monkeypatch, tmp_path):
    """a alone on e0, b alone on e1: b keeps completing frames while a's stage blocks; the run
    must still stop, naming a (counting the frames of both, it ran for ever)."""
    from hetflow.plan.mapping import Mapping

    engine = KINDS[kind](request, monkeypatch, tmp_path)
    engine.mappings = lambda: [Mapping({l.name: on for l in app.graph.layers})
                               for app, on in zip(engine.mp.apps, (engine.e0, engine.e1))]
    marks, release = tmp_path / "marks", tmp_path / "release"
    before = Leftovers()
    # were the stall missed, the live application would keep the run going: Ctrl-C it after
    # a while, so that the test fails (the run returns, no RuntimeFault) instead of hanging
    guard = threading.Timer(30.0, _thread.interrupt_main)
    guard.start()
    try:
        with pytest.raises(RuntimeFault, match=r"^stall: no frame completed for 1 s by a \("):
            engine.run(("hang", AFTER, str(marks), str(release)), lambda: None)
        assert time.time() - injected_at(marks) < STALL + BOUND
    finally:
        guard.cancel()
        guard.join()
        release.touch()
    before.check()


def test_ctrl_c_returns_what_was_measured_marked_incomplete(engine):
    running, interrupted, lost = [True], [], []
    timer: list[threading.Timer] = []

    def interrupt():
        if running[0]:  # never after the run: pytest would take it for the session's Ctrl-C
            interrupted.append(time.time())
            if sigint_reaches_python():
                os.kill(os.getpid(), signal.SIGINT)
            else:  # a real Ctrl-C would kill the whole test session: fail this test instead
                lost.append(True)
                _thread.interrupt_main(signal.SIGINT)

    def on_running():
        if not timer:  # (the multi-CNN engines: "running", just before their threads start)
            timer.append(threading.Timer(1.0, interrupt))
            timer[0].start()

    before = Leftovers()
    try:
        report = engine.run(None, on_running)
    except KeyboardInterrupt:  # fail this test, not the session
        pytest.fail("Ctrl-C was not caught by the engine")
    finally:
        running[0] = False
        for t in timer:
            t.cancel()
            t.join()
    stopped = time.time()
    assert not lost, "SIGINT was left at its default action: Ctrl-C would kill the process"
    assert interrupted and stopped - interrupted[0] < BOUND
    assert not report.complete
    frames = [r.frames for r in report.apps] if hasattr(report, "apps") else [report.frames]
    assert all(0 < n < engine.frames for n in frames), frames  # what was measured until Ctrl-C
    before.check()


def test_frozen_heap_blocks_nest_and_keep_the_heap_frozen_until_the_last_exits():
    import gc
    import sys

    from hetflow.runtime.harness import frozen_heap

    before = sys.getswitchinterval()
    assert gc.get_freeze_count() == 0
    with frozen_heap(0.001):
        assert gc.get_freeze_count() > 0 and sys.getswitchinterval() == 0.001
        with frozen_heap(0.002):  # a run inside a run: the outer block's settings hold
            assert sys.getswitchinterval() == 0.001
        assert gc.get_freeze_count() > 0, "the inner block unfroze the outer one's heap"
        assert sys.getswitchinterval() == 0.001
    assert gc.get_freeze_count() == 0 and sys.getswitchinterval() == before
