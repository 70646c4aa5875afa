"""One element's loop: the core of the multi-CNN engines, run by one thread per element
(`run-multi --engine threads`) or one process per element (`--engine processes`); only how
messages travel differs (queue.Queue or multiprocessing queues).

A single loop releases the element's frames that are due (each application at its period),
runs the highest-priority ready firing (priority, then frame; non-preemptive: the scheduling
model of the schedulability analysis, whose blocking term is the firing already running), and
otherwise waits for the next release or a message (sleeping, then spinning its last `spin`
seconds). Readiness is `plan.schedule.Readiness`: an actor fires its phases in CSDF order, a
firing waits for its inputs of the same frame. A firing whose successor runs elsewhere sends
the tensors that successor needs to its element's inbox; the element running the application's
last firing (its *collector*) also hears "part done" from each other element and measures the
response, from the frame's nominal release to the end of its last firing.
An application of period 0 runs free: a frame whenever the element holds fewer than
`max_in_flight` of it and (for a split application) the collector's finished frames, which it
announces, are at most `max_in_flight` behind; priorities still order the firings, so a
free-running application of low priority gets the time the others leave.
"""
from __future__ import annotations

import heapq
import queue
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hetflow.errors import InputError
from hetflow.plan.schedule import Firing, FrameState, Readiness, firings

from hetflow.multi.multiplan import AppEntry, MultiPlan
from hetflow.runtime.inputs import _NP

SPIN = 3e-4  # s: the last stretch before a release is spun, not slept (wake-up latency)
PROGRESS_EVERY = 0.2  # s: the longest wait, so a stop or a progress report is never late


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


@dataclass
class AppState:
    """One application as an element sees it: its schedule, readiness, and what it measured."""
    index: int
    entry: AppEntry
    runners: dict  # (element, phase index) -> Runner
    source: Callable[[int], dict]
    schedule: list[Firing]  # one frame's firings, in a topological order
    flow: Readiness
    responses: list[float] = field(default_factory=list)
    execs: list[float] = field(default_factory=list)  # per frame, as responses
    done_at: list[float] = field(default_factory=list)
    late_releases: int = 0
    peak_in_flight: int = 0
    kept: dict[int, dict] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.entry.name

    def record(self, fr: FrameState, k: int, end: float, keep: bool) -> None:
        """Frame k's response ended at `end`."""
        self.responses.append(end - fr.release)
        self.execs.append(fr.exec)
        self.done_at.append(end)
        if keep:
            self.kept[k] = {t: fr.tensors[t] for t in self.entry.plan.app.model_outputs}


def make_app(index: int, entry: AppEntry, runners: dict, source: Callable[[int], dict],
             element: str | None = None) -> AppState:
    """An application's schedule; with `element`, the part one element's process runs (it
    measures the response when it runs the last firing, hearing from every other element)."""
    schedule = firings(entry.plan.app)
    if element is None:
        return AppState(index, entry, runners, source, schedule, Readiness(schedule))
    local = {i for i, f in enumerate(schedule) if f.actor == element}
    others = {f.actor for f in schedule} - {element}
    parts = len(others) if schedule[-1].actor == element else 0
    return AppState(index, entry, runners, source, schedule, Readiness(schedule, local, parts))


def prewarm(app: AppState, graph, only: set[int] | None = None) -> None:
    """Run one frame through every session (or the firings in `only`, those of one element)
    in phase order before the clock starts: first calls allocate and tune, and would otherwise
    show up as missed deadlines. An input another element would produce is zeros of its shape."""

    tensors = dict(app.source(0))
    for i, f in enumerate(app.schedule):
        if only is not None and i not in only:
            continue
        for t in f.inputs:
            if t not in tensors:
                info = graph.tensors[t]
                tensors[t] = np.zeros(info.shape, _NP.get(info.dtype, np.float32))
        tensors.update(app.runners[(f.actor, f.phase)].run({t: tensors[t] for t in f.inputs}))


class Element:
    """One element's loop: its applications' schedules restricted to its own firings
    (`make_app(..., element)`), a ready queue, and an inbox for what other elements send."""

    def __init__(self, element: str, apps, max_in_flight: int, keep: Callable[[int], bool],
                 trace: bool, inboxes: dict, spin: float = SPIN):
        self.element = element
        self.spin = spin
        self.what = "setup"  # what it does now: named by a fault or a stall
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
        # free-running (period 0): frames the collector has finished, heard from it; an element
        # opens frame k only below that + max_in_flight, so no element runs ahead of the rest
        self.credits = {a.index: 0 for a in apps}
        self.peers = {a.index: sorted({f.actor for f in a.schedule} - {element}) for a in apps}
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
                if a.entry.period > 0:
                    when = t0 + k * a.entry.period
                    if when > now:
                        break
                elif self._may_open(a, k):  # free-running: a frame whenever there is room
                    when = now
                else:
                    break
                if len(a.flow.frames) >= self.max_in_flight:
                    if self.late_counted[a.index] != k and a.entry.period > 0:
                        a.late_releases += 1
                        self.late_counted[a.index] = k
                    break
                for i in a.flow.open(k, when, a.source(k)):
                    self._push(a, k, i, when)
                a.peak_in_flight = max(a.peak_in_flight, len(a.flow.frames))
                self.next_frame[a.index] = k + 1
                for msg in self.pending.pop((a.index, k), []):  # (each pushes what it readies)
                    self._apply(a, k, msg, now)

    def _may_open(self, a, k: int) -> bool:
        return self.collects[a.index] or k < self.credits[a.index] + self.max_in_flight

    def next_release(self, t0: float) -> float:
        times = [t0 + self.next_frame[a.index] * a.entry.period if a.entry.period > 0
                 else t0 for a in self.apps if len(a.flow.frames) < self.max_in_flight
                 and (a.entry.period > 0 or self._may_open(a, self.next_frame[a.index]))]
        return min(times) if times else time.perf_counter() + 0.01

    # ---- messages from other elements
    def receive(self, msg) -> None:
        ai, k = msg[1], msg[2]
        if msg[0] == "done":  # ("done", app, frame): the collector finished a free-running frame
            self.credits[ai] += 1
            return
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
        else:  # ("part", app, frame, end, exec, outputs, release): its firings elsewhere ended
            _, _, _, end, ran, outputs, release = msg
            fr.tensors.update(outputs)
            fr.release = min(fr.release, release)  # free-running: from where it opened first
            if a.flow.part_ended(k, end, ran):
                self._done_here(a, k)

    # ---- firing
    def fire(self) -> None:
        _, k, i, ai, ready_at = heapq.heappop(self.ready)
        a = self.by_index[ai]
        f = a.schedule[i]
        fr = a.flow.frames[k]
        feeds = {t: fr.tensors[t] for t in f.inputs}
        # named while it runs: a firing that raises or hangs is the one a fault or stall names
        self.what = f"application {a.name}, stage {f.actor} phase {f.phase}, frame {k}"
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

    def _done_here(self, a, k: int) -> None:
        """Every firing of frame k that this element waits for is done."""
        fr = a.flow.frames.pop(k)
        keep = self.keep(k)
        if self.collects[a.index]:
            a.record(fr, k, fr.last_end, keep)
            if a.entry.period <= 0:
                for el in self.peers[a.index]:
                    self.inboxes[el].put(("done", a.index, k))
        else:
            outputs = a.entry.plan.app.model_outputs
            mine = {t: fr.tensors[t] for t in outputs if t in fr.tensors} if keep else {}
            self.inboxes[self.collector[a.index]].put(("part", a.index, k, fr.last_end, fr.exec,
                                                           mine, fr.release))

    def run(self, t0: float, stopped: Callable[[], bool],
            report: Callable[[], None] | None = None) -> None:
        """Until `stopped()`: frames released from `t0`; `report()` every PROGRESS_EVERY."""
        inbox = self.inboxes[self.element]
        split = any(len({f.actor for f in a.schedule}) > 1 for a in self.apps)
        last_report = 0.0
        while not stopped():
            now = time.perf_counter()
            if split:
                while True:
                    try:
                        self.receive(inbox.get_nowait())
                    except queue.Empty:
                        break
            self.release_due(t0, now)
            if report and now - last_report > PROGRESS_EVERY:
                report()
                last_report = now
            if self.ready:
                self.fire()
                continue
            self.what = "waiting for the next release"
            delay = self.next_release(t0) - time.perf_counter()
            if delay > self.spin:
                wait = min(delay - self.spin, PROGRESS_EVERY)
                if split:  # a message from another element may make a firing ready
                    try:
                        self.receive(inbox.get(timeout=wait))
                    except queue.Empty:
                        pass
                else:
                    time.sleep(wait)

    def results(self) -> dict:
        """What the engine reports, per application and for the element (picklable)."""
        return {"apps": {a.name: {"responses": a.responses, "execs": a.execs,
                                  "done_at": a.done_at, "late_releases": a.late_releases,
                                  "peak_in_flight": a.peak_in_flight, "kept": a.kept,
                                  "collector": self.collects[a.index]}
                         for a in self.apps},
                "busy": self.busy, "dispatch": self.dispatch, "events": self.events or []}
