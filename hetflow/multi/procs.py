"""Run a multi-plan with one process per element (`run-multi --engine processes`).

The thread engine shares one interpreter: a firing that is due can wait for another thread's
Python code (the GIL), and on the GPU machine that showed as response-time tails of several to
tens of milliseconds. Here every element is its own process, pinned to its cores, with its own
interpreter and sessions, running the same driver as a thread would (`runtime.loop.drive_shared`
over each application's workers there, `apps.app_run`). Channels between elements are
`QueueChannel`s: a tensor goes to the consumer's process as a message, and the consumer's
window comes back the same way; a frame completed tells the process that loads the frames
that the next may enter; an application whose model outputs come from several elements
completes its frames in one of their processes (`collector_of`), the others handing their
outputs to it. One thread per process reads its messages.

The parent spawns the processes, starts them together once each has loaded and warmed its
sessions, watches progress (a stall or a dead process stops the run naming the element), stops
them when every application has its frames, and builds the same report as the thread engine.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import multiprocessing as mp_
import os
import queue
import signal
import threading
import time
from typing import Callable

from hetflow import interrupt
from hetflow.errors import RuntimeFault
from hetflow.backends import caller_cores_of, control_cores, pin_current_thread, pinned
from hetflow.backends.affinity import current_affinity, realtime_process
from hetflow.runtime.api import load_plan_model
from hetflow.runtime.channel import FrameChannel, QueueChannel
from hetflow.runtime.engine import batch_windows, prepare
from hetflow.runtime.harness import Control, fault_text, frozen_heap, supervise
from hetflow.runtime.loop import Dispatched, drive_shared

from hetflow.multi.apps import (app_results, app_run, delivering_elements, frames_per_app,
                                hosts, loading_elements, prewarm, prioritise)
from hetflow.multi.multiplan import AppEntry, MultiPlan
from hetflow.multi.report import multi_report

READY_TIMEOUT = 600.0  # s: loading models and sessions in every process
PROGRESS_EVERY = 0.2  # s: how often an element process says what it has done
LISTEN = 0.05  # s: how often a process's message thread looks at the stop flag
SPIN = 3e-4  # s: the last stretch before a release is spun, not slept (wake-up latency)


# ------------------------------------------------------------------ the element process


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel kill this process when its parent exits, however it exits (Linux's
    PR_SET_PDEATHSIG; elsewhere nothing)."""

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # it died before the request was made
        os._exit(1)


def _post(inbox, head: tuple, *body) -> None:
    inbox.put((*head, *body))


def element_channels(index: int, entry: AppEntry, element: str, inboxes: dict) -> dict:
    """The channels of application `entry` (number `index`) that `element` reads or writes,
    each a `QueueChannel` to the process at its other end."""
    windows = batch_windows(entry.plan)
    out = {}
    for c in entry.plan.app.channels:
        if element not in (c.src, c.dst) or c.name in out:
            continue
        if c.src == c.dst:  # (both ends here)
            out[c.name] = FrameChannel(c.name, windows[c.name])
            continue
        out[c.name] = QueueChannel(
            c.name, windows[c.name],
            functools.partial(_post, inboxes[c.dst], ("item", index, c.name)),
            functools.partial(_post, inboxes[c.src], ("low", index, c.name)))
    return out


def element_main(plan: dict, element: str, names: list[str], settings: dict, out, inboxes,
                 go, start, stop, parent_pid: int) -> None:
    """Entry point of one element's process (spawned): load, warm up, report ready, wait for
    the start, drive its workers until told to stop, send what they measured."""
    # the parent handles Ctrl-C and SIGTERM (they reach a terminal's or a service's whole
    # process group) and stops us; if the parent dies, so do we
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    die_with_parent(parent_pid)
    what = "setup"
    prepared = []
    control = Control()
    try:
        mp = MultiPlan.from_dict(plan)
        el = next(a.plan.elements[element] for a in mp.apps if a.name in names)
        every = {e.name: e for a in mp.apps for e in a.plan.elements.values()}.values()
        aside = control_cores(every) or current_affinity()  # (before this thread is pinned)
        pin_current_thread(el.cores)
        wake = threading.Event()
        warmup, n_check = settings["warmup"], settings["check_frames"]
        channels: dict[tuple[int, str], QueueChannel] = {}
        runs = element_runs(mp, element, names, settings, control, wake, inboxes, prepared,
                            channels)
        # this thread (the driver, and the caller of every run) on the runners' caller core:
        # ONNX Runtime's pool threads have the element's other cores, and the driver must not
        # share one with them (letting the pool threads spin as well made one run's tail 40x
        # longer)
        cores = caller_cores_of((r for pp in prepared for r in pp.runners.values()), el)
        pin_current_thread(cores)
        # a thread keeps the cores of the thread that started it: this process's helpers
        # (below) and each queue's feeder thread (started by its first put) go to `aside`, off
        # the driver's core, where a woken one would hold a due firing back (stalls of 1.5-2 ms
        # in a GPU driver's launches on the GPU machine)
        aside = aside - cores
        with pinned(aside):
            for q in inboxes.values():
                q.put(("hello",))
        for r, pp in zip(runs, prepared):
            what = f"warm-up of {r.name}"
            prewarm(pp, settings["seed"] + r.index, only={element})
        by_index = {r.index: r for r in runs}
        dispatched = Dispatched()
        ended = threading.Event()

        def listen() -> None:  # what the other processes send, and the parent's stop
            try:
                while not ended.is_set():
                    if stop.value:
                        control.stop.set()
                        wake.set()
                        return
                    try:
                        msg = inboxes[element].get(timeout=LISTEN)
                    except queue.Empty:
                        continue
                    if msg[0] == "item":
                        channels[(msg[1], msg[2])].arrived(msg[3], msg[4])
                    elif msg[0] == "low":
                        channels[(msg[1], msg[2])].moved(msg[3])
                    elif msg[0] == "hello":  # (a process started its queue's feeder)
                        continue
                    elif msg[0] == "deliver":  # outputs of a frame delivered elsewhere
                        by_index[msg[1]].stream.deliver(*msg[2:])
                    else:  # ("done", app): a frame completed elsewhere: the next may enter
                        by_index[msg[1]].admission.completed(time.perf_counter())
            except BaseException as e:  # noqa: BLE001 - stops the run, naming it
                control.fail(fault_text(element, "its messages", e))
                wake.set()

        def report() -> None:  # from a thread: a driver stuck in a firing is still described
            while not ended.wait(PROGRESS_EVERY):
                out.put(("progress", element, ({r.name: r.done() for r in runs if r.delivers},
                                               control.waiting.get(element, "running"))))

        # frozen before the start: a full collection with torch loaded takes ~0.1 s, which
        # at the start made the first hundred frames late (measured on the GPU machine)
        with frozen_heap(), contextlib.ExitStack() as during:
            with pinned(aside):  # (its first put starts the queue's thread)
                out.put(("ready", element, None))
            rt = during.enter_context(realtime_process()) if settings["realtime"] else False
            while not go.value:  # flags, not multiprocessing Events: a killed waiter would
                time.sleep(0.001)  # hang an Event's set() (it waits for every sleeper)
            for r in runs:
                r.start(start.value)
            what = "the loop"
            helpers = [threading.Thread(target=f, name=f"hetflow-{element}-{f.__name__}",
                                        daemon=True) for f in (listen, report)]
            with pinned(aside):
                for t in helpers:
                    t.start()
            try:
                drive_shared(element, [t for r in runs for t in r.tenants()], control, wake,
                             cores, dispatched, SPIN, mp.gpu_lanes == "shared")
                while not control.stop.wait(LISTEN):  # its frames all done: until the stop
                    pass
            finally:
                ended.set()
                for t in helpers:
                    t.join()
        control.raise_fault()
        out.put(("result", element, {"apps": {r.index: r.measured(warmup, n_check)
                                              for r in runs},
                                     "dispatch": (dispatched.delay, dispatched.turns),
                                     "realtime": rt}))
    except BaseException as e:  # report where it happened; the parent stops the others
        out.put(("fault", element, control.faults[0] if control.faults
                 else fault_text(element, what, e)))
    finally:
        for pp in prepared:
            try:
                pp.close()
            except Exception:
                pass


def element_runs(mp: MultiPlan, element: str, names: list[str], settings: dict,
                 control: Control, wake: threading.Event, inboxes: dict, prepared: list,
                 channels: dict) -> list:
    """`element`'s part of each application in `names` (highest priority first): its sessions
    prepared (appended to `prepared`, which the caller closes), its channels (added to
    `channels` by (application, name)), and the run that drives them there."""
    warmup, n_check = settings["warmup"], settings["check_frames"]
    runs = []
    for i, entry in enumerate(mp.apps):
        if entry.name not in names:
            continue
        pp = prepare(entry.plan, load_plan_model(entry.plan), only={element})
        prepared.append(pp)
        prioritise(pp, i, len(mp.apps))
        chans = element_channels(i, entry, element, inboxes)
        channels.update({(i, name): c for name, c in chans.items()})
        others = sorted(loading_elements(entry) - {element})
        tell = functools.partial(_tell_loaders, [inboxes[e] for e in others], i) \
            if others else None
        collector = collector_of(entry)
        forward = None if element == collector else functools.partial(
            _post, inboxes[collector], ("deliver", i))
        runs.append(app_run(i, entry, pp, settings["frames"][i], control,
                            settings["max_in_flight"],
                            lambda k: warmup <= k < warmup + n_check, settings["seed"],
                            {element: wake}, settings["trace"], {element}, chans, tell,
                            forward))
    return runs


def _tell_loaders(inboxes: list, index: int) -> None:
    """A frame of application `index` completed here: the other processes that load its
    frames may let the next one enter."""
    for inbox in inboxes:
        inbox.put(("done", index))


def collector_of(entry: AppEntry) -> str:
    """The element whose process completes the application's frames: one of those that deliver
    its model outputs (the others hand theirs to it)."""
    return min(delivering_elements(entry))


# ------------------------------------------------------------------ the parent


def run_processes(mp: MultiPlan, graphs: dict, frames: int, warmup: int, check_frames: int,
                  max_in_flight: int, stall_timeout: float, trace_path, progress, seed: int,
                  realtime: bool = False, on_started: Callable[[list], None] | None = None):
    """`run_multiplan` on the process engine: every element a process of its own."""
    placement = hosts(mp)
    target = warmup + frames
    ctx = mp_.get_context("spawn")  # CUDA in a child needs a fresh interpreter
    out = ctx.Queue()
    inboxes = {el: ctx.Queue() for el in placement}
    go, stop, start = ctx.RawValue("b", 0), ctx.RawValue("b", 0), ctx.RawValue("d", 0.0)
    settings = {"seed": seed, "warmup": warmup, "check_frames": check_frames,
                "max_in_flight": max_in_flight, "trace": trace_path is not None,
                "realtime": realtime, "frames": frames_per_app(mp, target)}
    procs = {el: ctx.Process(target=element_main, name=f"hetflow-{el}", daemon=True,
                             args=(mp.to_dict(), el, names, settings, out, inboxes, go, start,
                                   stop, os.getpid()))
             for el, names in placement.items()}
    for p in procs.values():
        p.start()

    watching = contextlib.ExitStack()  # this process, while it watches, stays off the cores
    watching.enter_context(pinned(control_cores(  # of the CPU stages
        el for a in mp.apps for el in a.plan.elements.values())))
    counts = {a.name: 0 for a in mp.apps}
    doing = {el: "not started" for el in procs}  # what each element's loop does, as it said
    results: dict[str, dict] = {}
    t_stop = None

    def dead() -> str | None:
        for el, p in procs.items():
            if el not in results and p.exitcode is not None:
                return f"element {el}: its process died (exit code {p.exitcode})"
        return None

    def next_message(timeout: float):
        """(kind, element, body), or None after `timeout`; a fault or a dead process raises."""
        try:
            kind, el, body = out.get(timeout=timeout)
        except queue.Empty:
            if (why := dead()):
                raise RuntimeFault(why) from None
            return None
        if kind == "fault":
            raise RuntimeFault(body)
        return kind, el, body

    try:
        if progress:
            progress(f"loading sessions in {len(procs)} processes")
        ready: set[str] = set()
        deadline = time.perf_counter() + READY_TIMEOUT
        while len(ready) < len(procs):
            msg = next_message(0.2)
            if msg is not None and msg[0] == "ready":
                ready.add(msg[1])
            elif msg is None and time.perf_counter() > deadline:
                raise RuntimeFault(f"processes not ready after {READY_TIMEOUT:.0f} s: "
                                   f"{', '.join(sorted(set(procs) - ready))}")
        if progress:
            progress(f"running {len(mp.apps)} applications on {len(procs)} processes")
        start.value = time.perf_counter() + 0.02
        go.value = 1
        if on_started:  # (every process loaded and running)
            on_started(list(procs.values()))

        def step() -> dict[str, int] | None:
            if all(n >= target for n in counts.values()):
                return None
            msg = next_message(0.1)
            if msg is not None and msg[0] == "progress":
                counts.update(msg[2][0])
                doing[msg[1]] = msg[2][1]
            return {name: n for name, n in counts.items() if n < target}

        def behind(_: int) -> str:
            return ("(" + ", ".join(f"{n} {c}/{target}" for n, c in counts.items()) + "; "
                    + "; ".join(f"{el}: {what}" for el, what in sorted(doing.items())) + ")")

        complete = supervise(step, Control(), stall_timeout, behind)
        t_stop = time.perf_counter()
        stop.value = 1
        # after a signal the user waits: what the elements measured, if they send it soon
        deadline = time.perf_counter() + (1.0 if interrupt.requested() else 60.0)
        while len(results) < len(procs) and time.perf_counter() < deadline:
            msg = next_message(0.2)
            if msg is not None and msg[0] == "result":
                results[msg[1]] = msg[2]
        if len(results) < len(procs):
            interrupt.check()  # after a signal: stopped, not a fault
            raise RuntimeFault("no results from " + ", ".join(sorted(set(procs) - set(results))))
    finally:
        stop.value = 1
        go.value = 1  # a process still waiting for the start must not hang
        if len(results) < len(procs):  # a fault: what the others were doing no longer counts
            for p in procs.values():
                if p.is_alive():
                    p.kill()  # (they ignore SIGTERM: the parent stops them)
        for p in procs.values():
            p.join(timeout=5.0)
            if p.is_alive():
                p.kill()
                p.join(timeout=2.0)
        for q in (out, *inboxes.values()):
            q.close()
            q.cancel_join_thread()  # what is still queued is not wanted any more
        watching.close()
    rt = all(r.get("realtime") for r in results.values()) if realtime else None
    per_app = [app_results([r["apps"][i] for r in results.values() if i in r["apps"]])
               for i in range(len(mp.apps))]
    return multi_report(mp, graphs, per_app,
                        {el: r["dispatch"] for el, r in results.items()},
                        t_stop - start.value, complete, warmup, seed, trace_path, "processes", rt)
