"""Run a multi-plan with one process per element (`run-multi --engine processes`).

The thread engine shares one interpreter: a firing that is due can wait for another thread's
Python code (the GIL), and on the GPU machine that showed as response-time tails of several to
tens of milliseconds. Here every element is its own process, pinned to its cores, with its own
interpreter and sessions, running the same loop as a thread would (`element.Element`), with
multiprocessing queues between elements.

The parent spawns the processes, starts them together once each has loaded and warmed its
sessions, watches progress (a stall or a dead process stops the run naming the element), stops
them when every application has its frames, and builds the same report as the thread engine.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp_
import os
import queue
import signal
import threading
import time
from typing import Callable

from hetflow import interrupt
from hetflow.errors import RuntimeFault
from hetflow.runtime.harness import Control, fault_text, supervise

from hetflow.multi.element import PROGRESS_EVERY, Element, hosts, make_app, prewarm
from hetflow.multi.multiplan import MultiPlan
from hetflow.multi.report import multi_report
import ctypes
from hetflow.backends import control_cores, pinned

READY_TIMEOUT = 600.0  # s: loading models and sessions in every process


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


def element_main(plan: dict, element: str, names: list[str], settings: dict, out, inboxes,
                 go, start, stop, parent_pid: int) -> None:
    """Entry point of one element's process (spawned): load, warm up, report ready, wait for
    the start, run the loop until told to stop, send the results."""
    # the parent handles Ctrl-C and SIGTERM (they reach a terminal's or a service's whole
    # process group) and stops us; if the parent dies, so do we
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    die_with_parent(parent_pid)
    what = "setup"
    prepared = []
    try:
        from hetflow.backends import caller_cores_of, pin_current_thread
        from hetflow.backends.affinity import realtime_process
        from hetflow.runtime.api import load_plan_model
        from hetflow.runtime.engine import prepare
        from hetflow.runtime.harness import frozen_heap
        from hetflow.runtime.inputs import random_source

        mp = MultiPlan.from_dict(plan)
        el = next(a.plan.elements[element] for a in mp.apps if a.name in names)
        pin_current_thread(el.cores)
        apps, graphs = [], {}
        for i, entry in enumerate(mp.apps):
            if entry.name not in names:
                continue
            graphs[entry.name] = graph = load_plan_model(entry.plan)
            pp = prepare(entry.plan, graph, only={element})
            prepared.append(pp)
            apps.append(make_app(i, entry, pp.runners,
                                 random_source(graph, settings["seed"] + i), element))
        # this thread (the loop, and the caller of every run) on the runners' caller core: ONNX
        # Runtime's pool threads have the element's other cores, and the loop must not share
        # one with them (letting the pool threads spin as well made one run's tail 40x longer)
        pin_current_thread(caller_cores_of((r for pp in prepared for r in pp.runners.values()),
                                           el))
        warmup, n_check = settings["warmup"], settings["check_frames"]
        loop = Element(element, apps, settings["max_in_flight"],
                       lambda k: warmup <= k < warmup + n_check, settings["trace"], inboxes)
        for a in apps:
            what = f"warm-up of {a.name}"
            prewarm(a, graphs[a.name], a.flow.local)
        # frozen before the start: a full collection with torch loaded takes ~0.1 s, which
        # at the start made the first hundred frames late (measured on the GPU machine)
        with frozen_heap(), contextlib.ExitStack() as during:
            out.put(("ready", element, None))  # (its first put starts the queue's thread)
            rt = during.enter_context(realtime_process()) if settings["realtime"] else False
            while not go.value:  # flags, not multiprocessing Events: a killed waiter would
                time.sleep(0.001)  # hang an Event's set() (it waits for every sleeper)
            what = "the loop"
            ended = threading.Event()

            def report() -> None:  # from a thread: a loop stuck in a stage is still described
                while not ended.wait(PROGRESS_EVERY):
                    out.put(("progress", element, (
                        {a.name: len(a.responses) for a in apps if loop.collects[a.index]},
                        loop.what)))

            reporter = threading.Thread(target=report, name=f"hetflow-{element}-report",
                                        daemon=True)
            reporter.start()
            try:
                loop.run(start.value, lambda: bool(stop.value))
            finally:
                ended.set()
                reporter.join()
        out.put(("result", element, {**loop.results(), "realtime": rt}))
    except BaseException as e:  # report where it happened; the parent stops the others
        if what == "the loop":
            what = loop.what
        out.put(("fault", element, fault_text(element, what, e)))
    finally:
        for pp in prepared:
            try:
                pp.close()
            except Exception:
                pass


# ------------------------------------------------------------------ the parent


def run_processes(mp: MultiPlan, graphs: dict, frames: int, warmup: int, check_frames: int,
                  max_in_flight: int, stall_timeout: float, trace_path, progress, seed: int,
                  realtime: bool = False, on_started: Callable[[list], None] | None = None):
    placement = hosts(mp)
    ctx = mp_.get_context("spawn")  # CUDA in a child needs a fresh interpreter
    out = ctx.Queue()
    inboxes = {el: ctx.Queue() for el in placement}
    go, stop, start = ctx.RawValue("b", 0), ctx.RawValue("b", 0), ctx.RawValue("d", 0.0)
    settings = {"seed": seed, "warmup": warmup, "check_frames": check_frames,
                "max_in_flight": max_in_flight, "trace": trace_path is not None,
                "realtime": realtime}
    procs = {el: ctx.Process(target=element_main, name=f"hetflow-{el}", daemon=True,
                             args=(mp.to_dict(), el, names, settings, out, inboxes, go, start,
                                   stop, os.getpid()))
             for el, names in placement.items()}
    for p in procs.values():
        p.start()

    watching = contextlib.ExitStack()  # this process, while it watches, stays off the cores
    watching.enter_context(pinned(control_cores(  # of the CPU stages
        el for a in mp.apps for el in a.plan.elements.values())))
    if on_started:
        on_started(list(procs.values()))
    target = warmup + frames
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
    return multi_report(mp, graphs, results, t_stop - start.value, complete, warmup, seed,
                        trace_path, "processes", rt)
