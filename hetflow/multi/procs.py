"""Run a multi-plan with one process per element (`run-multi --engine processes`).

The thread engine (runtime.py) shares one interpreter: a worker whose firing is due can wait for
another thread's Python code (the GIL), and on the GPU machine that showed as response-time
tails of several to tens of milliseconds. Here every element is its own process, pinned to its
cores, with its own interpreter and sessions, and it releases its applications' frames itself
(no source thread to wake): a single loop that releases the frames that are due, runs the
highest-priority ready firing (priority, then frame; non-preemptive), and otherwise waits for
the next release or a message (sleeping, then spinning its last `SPIN` seconds on its core).

An application split over elements: every process that runs some of its firings creates the
frame at its release time; a firing whose successor runs elsewhere sends the tensors it needs
to that element's inbox (a multiprocessing queue); the element running the application's last
firing (its *collector*) also receives a "part done" from each other element and measures the
response. An actor's phase 0 of frame k+1 waits for its last phase of frame k (CSDF order).

The parent spawns the processes, starts them together once each has loaded and warmed its
sessions, watches progress (a stall or a dead process stops the run naming the element), stops
them when every application has its frames, and builds the same report as the thread engine.
"""
from __future__ import annotations

import contextlib
import heapq
import multiprocessing as mp_
import queue
import signal
import time
from typing import Callable

from hetflow.errors import InputError, RuntimeFault
from hetflow.runtime.harness import Control, fault_text, supervise
from hetflow.runtime.schedule import firings

from .multiplan import MultiPlan

SPIN = 3e-4  # s: the last stretch before a release is spun, not slept (wake-up latency)
PROGRESS_EVERY = 0.2  # s
READY_TIMEOUT = 600.0  # s: loading models and sessions in every process


def hosts(mp: MultiPlan) -> dict[str, list[str]]:
    """element -> the applications with a firing on it (replica groups are refused)."""
    out: dict[str, list[str]] = {}
    for a in mp.apps:
        for actor in a.plan.app.phases:
            if "|" in actor:
                raise InputError(f"application {a.name}: replica group {actor!r} is not "
                                 "supported in a multi-application plan")
            out.setdefault(actor, [])
            if a.name not in out[actor]:
                out[actor].append(a.name)
    return out


def collector(entry) -> str:
    """The element that measures an application's response: the one running its last firing."""
    return firings(entry.plan.app)[-1].actor


# ------------------------------------------------------------------ the element process


class _Element:
    """The state of one element's loop (in its own process): its applications' schedules,
    restricted to its own firings (`make_app(..., element)`), and a ready queue."""

    def __init__(self, element: str, apps, max_in_flight: int, keep: Callable[[int], bool],
                 trace: bool, inboxes: dict):
        self.element = element
        self.apps = apps
        self.by_index = {a.index: a for a in apps}
        self.max_in_flight = max_in_flight
        self.keep = keep
        self.inboxes = inboxes
        self.ready: list[tuple] = []
        self.next_frame = {a.index: 0 for a in apps}
        self.late_counted = {a.index: -1 for a in apps}
        self.collects = {a.index: a.schedule[-1].actor == element for a in apps}
        self.collector = {a.index: a.schedule[-1].actor for a in apps}
        self.pending: dict[tuple[int, int], list] = {}  # messages for frames not created yet
        self.busy = 0.0
        self.dispatch = [0.0, 0]
        self.free_at = 0.0
        self.events: list[tuple] | None = [] if trace else None

    def _push(self, a, k: int, i: int, when: float) -> None:
        heapq.heappush(self.ready, (a.entry.priority, k, i, a.index, when))

    def release_due(self, t0: float, now: float) -> None:
        for a in self.apps:
            while True:
                k = self.next_frame[a.index]
                when = t0 + k * a.entry.period
                if when > now:
                    break
                if len(a.flow.frames) >= self.max_in_flight:
                    if self.late_counted[a.index] != k:
                        a.late_releases += 1
                        self.late_counted[a.index] = k
                    break
                for i in a.flow.open(k, when, a.source(k)):
                    self._push(a, k, i, when)
                a.peak_in_flight = max(a.peak_in_flight, len(a.flow.frames))
                self.next_frame[a.index] = k + 1
                for msg in self.pending.pop((a.index, k), []):  # (each pushes what it readies)
                    self._apply(a, k, msg, now)

    def next_release(self, t0: float) -> float:
        times = [t0 + self.next_frame[a.index] * a.entry.period for a in self.apps
                 if len(a.flow.frames) < self.max_in_flight]
        return min(times) if times else time.perf_counter() + 0.01

    # ---- messages from other elements
    def receive(self, msg) -> None:
        ai, k = msg[1], msg[2]
        a = self.by_index[ai]
        if k in a.flow.frames:
            self._apply(a, k, msg, time.perf_counter())
        else:
            self.pending.setdefault((ai, k), []).append(msg)

    def _apply(self, a, k: int, msg, now: float) -> None:
        fr = a.flow.frames[k]
        if msg[0] == "dep":  # ("dep", app, frame, firing, tensors)
            _, _, _, s, tensors = msg
            fr.tensors.update(tensors)
            if a.flow.satisfy(k, s):
                self._push(a, k, s, now)
        else:  # ("part", app, frame, end, exec, outputs): another element finished its firings
            _, _, _, end, ran, outputs = msg
            fr.tensors.update(outputs)
            if a.flow.part_ended(k, end, ran):
                self._done_here(a, k)

    # ---- firing
    def fire(self) -> str:
        _, k, i, ai, ready_at = heapq.heappop(self.ready)
        a = self.by_index[ai]
        f = a.schedule[i]
        fr = a.flow.frames[k]
        feeds = {t: fr.tensors[t] for t in f.inputs}
        t0 = time.perf_counter()
        out = a.runners[(f.actor, f.phase)].run(feeds)
        t1 = time.perf_counter()
        self.busy += t1 - t0
        self.dispatch[0] += max(0.0, t0 - max(ready_at, self.free_at))
        self.dispatch[1] += 1
        self.free_at = t1
        if self.events is not None:
            self.events.append((self.element, f"{a.name}:{f.actor}", f.phase, k, t0, t1))
        fr.tensors.update(out)
        ready, elsewhere, done = a.flow.ended(k, i, t1, t1 - t0)
        for k2, i2 in ready:
            self._push(a, k2, i2, t1)
        for s in elsewhere:
            needs = {t: out[t] for t in a.schedule[s].inputs if t in out}
            self.inboxes[a.schedule[s].actor].put(("dep", ai, k, s, needs))
        if done:
            self._done_here(a, k)
        return f"application {a.name}, stage {f.actor} phase {f.phase}, frame {k}"

    def _done_here(self, a, k: int) -> None:
        """Every firing of frame k that this element waits for is done."""
        fr = a.flow.frames.pop(k)
        keep = self.keep(k)
        if self.collects[a.index]:
            a.record(fr, k, fr.last_end, keep)
        else:
            outputs = a.entry.plan.app.model_outputs
            mine = {t: fr.tensors[t] for t in outputs if t in fr.tensors} if keep else {}
            self.inboxes[self.collector[a.index]].put(("part", a.index, k, fr.last_end, fr.exec,
                                                           mine))


def element_main(plan: dict, element: str, names: list[str], settings: dict, out, inboxes,
                 go, start, stop) -> None:
    """Entry point of one element's process (spawned): load, warm up, report ready, wait for
    the start, run the loop until told to stop, send the results."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    what = "setup"
    prepared = []
    try:
        from hetflow.backends import caller_cores_of, pin_current_thread
        from hetflow.backends.affinity import realtime_process
        from hetflow.runtime.api import load_plan_model
        from hetflow.runtime.engine import frozen_heap, prepare
        from hetflow.runtime.inputs import random_source

        from .runtime import _prewarm, make_app

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
        loop = _Element(element, apps, settings["max_in_flight"],
                        lambda k: warmup <= k < warmup + n_check, settings["trace"], inboxes)
        for a in apps:
            what = f"warm-up of {a.name}"
            _prewarm(a, graphs[a.name], a.flow.local)
        inbox = inboxes[element]
        split = any(len({f.actor for f in a.schedule}) > 1 for a in apps)
        # frozen before the start: a full collection with torch loaded takes ~0.1 s, which
        # at the start made the first hundred frames late (measured on the GPU machine)
        with frozen_heap(), contextlib.ExitStack() as during:
            out.put(("ready", element, None))  # (its first put starts the queue's thread)
            rt = during.enter_context(realtime_process()) if settings["realtime"] else False
            while not go.value:  # flags, not multiprocessing Events: a killed waiter would
                time.sleep(0.001)  # hang an Event's set() (it waits for every sleeper)
            t0 = start.value
            last_progress = 0.0
            while not stop.value:
                now = time.perf_counter()
                if split:
                    while True:
                        try:
                            loop.receive(inbox.get_nowait())
                        except queue.Empty:
                            break
                loop.release_due(t0, now)
                if now - last_progress > PROGRESS_EVERY:
                    out.put(("progress", element, {a.name: len(a.responses) for a in apps
                                                   if loop.collects[a.index]}))
                    last_progress = now
                if loop.ready:
                    what = loop.fire()
                    continue
                what = "waiting for the next release"
                delay = loop.next_release(t0) - time.perf_counter()
                if delay > SPIN:
                    wait = min(delay - SPIN, PROGRESS_EVERY)
                    if split:  # a message from another element may make a firing ready
                        try:
                            loop.receive(inbox.get(timeout=wait))
                        except queue.Empty:
                            pass
                    else:
                        time.sleep(wait)
        out.put(("result", element, {
            "apps": {a.name: {"responses": a.responses, "execs": a.execs,
                              "done_at": a.done_at,
                              "late_releases": a.late_releases,
                              "peak_in_flight": a.peak_in_flight, "kept": a.kept,
                              "collector": loop.collects[a.index]}
                     for a in apps},
            "busy": loop.busy, "dispatch": loop.dispatch, "events": loop.events or [],
            "realtime": rt}))
    except BaseException as e:  # report where it happened; the parent stops the others
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
    from .runtime import MultiRunReport, app_report

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
                                   stop))
             for el, names in placement.items()}
    for p in procs.values():
        p.start()
    from hetflow.backends import control_cores, pinned

    watching = contextlib.ExitStack()  # this process, while it watches, stays off the cores
    watching.enter_context(pinned(control_cores(  # of the CPU stages
        el for a in mp.apps for el in a.plan.elements.values())))
    if on_started:
        on_started(list(procs.values()))
    target = warmup + frames
    counts = {a.name: 0 for a in mp.apps}
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

        def step() -> int | None:
            if all(n >= target for n in counts.values()):
                return None
            msg = next_message(0.1)
            if msg is not None and msg[0] == "progress":
                counts.update(msg[2])
            return sum(counts.values())

        def behind(_: int) -> str:
            return "(" + ", ".join(f"{n} {c}/{target}" for n, c in counts.items()) + ")"

        complete = supervise(step, Control(), stall_timeout, behind)
        t_stop = time.perf_counter()
        stop.value = 1
        deadline = time.perf_counter() + 60.0
        while len(results) < len(procs) and time.perf_counter() < deadline:
            msg = next_message(0.2)
            if msg is not None and msg[0] == "result":
                results[msg[1]] = msg[2]
        if len(results) < len(procs):
            raise RuntimeFault("no results from " + ", ".join(sorted(set(procs) - set(results))))
    finally:
        stop.value = 1
        go.value = 1  # a process still waiting for the start must not hang
        if len(results) < len(procs):  # a fault: what the others were doing no longer counts
            for p in procs.values():
                if p.is_alive():
                    p.terminate()
        for p in procs.values():
            p.join(timeout=5.0)
            if p.is_alive():
                p.kill()
                p.join(timeout=2.0)
        for q in (out, *inboxes.values()):
            q.close()
            q.cancel_join_thread()  # what is still queued is not wanted any more
        watching.close()
    wall = t_stop - start.value
    reports = []
    for i, entry in enumerate(mp.apps):
        parts = [r["apps"][entry.name] for r in results.values() if entry.name in r["apps"]]
        d = next(p for p in parts if p["collector"])
        reports.append(app_report(entry, i, d["responses"], d["done_at"],
                                  sum(p["late_releases"] for p in parts),
                                  max(p["peak_in_flight"] for p in parts), d["kept"], warmup,
                                  complete, graphs[entry.name], seed, d["execs"]))
    util = {el: min(1.0, r["busy"] / wall) for el, r in results.items()} if wall > 0 else {}
    dispatch = {el: r["dispatch"][0] / r["dispatch"][1] for el, r in results.items()
                if r["dispatch"][1]}
    events = [ev for r in results.values() for ev in r["events"]]
    if trace_path is not None and events:
        from hetflow.runtime.trace import write_trace

        write_trace(trace_path, events, min(ev[4] for ev in events))
    rt = all(r.get("realtime") for r in results.values()) if realtime else None
    return MultiRunReport(reports, util, wall, complete, dispatch, "processes", rt)
