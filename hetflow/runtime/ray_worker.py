"""An element's Ray actor: it builds its phases' runners and runs the one firing loop
(`runtime.loop.drive`) over its compiled program, as a local worker thread does.

Its channels are `RayChannel` ends (`runtime.ray_channel`); its frame source is what the driver
hands it (`feed`), and its model outputs go back to the driver through `poll`, which also
carries the frames it started, those it took, and its first fault. The actor is threaded: the
loop runs in a thread of its own while Ray's threads deliver what other actors and the driver
send (`put`, `credit`, `feed`, `give`) and answer the driver (`poll`, `waits`, `stop`).
"""
from __future__ import annotations

import collections
import math
import os
import socket
import threading
import time
from typing import Any, Callable

import numpy as np
import onnx

from hetflow.errors import first_line
from hetflow.model.subnet import Subnet
from hetflow.plan.mapping import group_members
from hetflow.plan.plan import Plan
from hetflow.plan.program import FIRE, SEND, Program, compile_programs
from hetflow.plan.schedule import Dispatch, channel_windows, firings, member_of
from hetflow.runtime.harness import JOIN, Control
from hetflow.runtime.loop import Stream, Worker, drive
from hetflow.runtime.ray_channel import Inputs, RayChannel, Routes
from hetflow.backends import backend_for, caller_cores_of

THREADS = 8  # Ray threads per actor: what peers send and the driver asks, beside the loop


class StageFault(Exception):
    """A phase failed inside a worker; the message names element, node, stage, phase, layers."""


class NodeControl(Control):
    """The loop's Control, whose faults name the node beside the element (the loop names
    faults 'element E, ...', `harness.fault_text`); `changed` is set on every fault."""

    def __init__(self, element: str, node: str, changed: threading.Event):
        super().__init__()
        self.prefix, self.named, self.changed = (f"element {element}, ",
                                                 f"element {element} (node {node}), ", changed)

    def fail(self, message: str) -> None:
        if message.startswith(self.prefix):
            message = self.named + message[len(self.prefix):]
        super().fail(message)
        self.changed.set()


class PhaseRunner:
    """The runner of one phase as the loop sees it: it runs the actor's current runner of the
    phase (`ElementWorker.runners`, looked up each firing) and marks the phase as running, so
    that a stall names the firing that does not finish."""

    def __init__(self, worker: "ElementWorker", phase: int):
        self.worker, self.phase = worker, phase

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        w = self.worker
        w.running = self.phase
        out = w.runners[self.phase].run(feeds)
        w.running = None
        return out


class ElementWorker:
    """One element's worker (a member of its actor's replica group) as a Ray actor."""

    def __init__(self, plan_dict: dict, actor: str, element: str, node: str,
                 subnets: dict[int, bytes], trace: bool = False):
        self.plan = plan = Plan.from_dict(plan_dict)
        self.actor, self.element_name, self.node = actor, element, node
        self.element = plan.elements[element]
        self.runners: dict[int, Any] = {}  # phase -> runner (the loop reaches it through PhaseRunner)
        for ph in plan.app.phases[actor]:
            model = onnx.load_from_string(subnets[ph.index])
            sub = Subnet(f"{actor}#{ph.index}", tuple(ph.layers), model,
                         [i.name for i in model.graph.input], [o.name for o in model.graph.output],
                         {"bytes": subnets[ph.index]})
            try:
                self.runners[ph.index] = backend_for(self.element).prepare(sub, self.element)
            except Exception as e:
                raise StageFault(f"element {element} (node {node}): cannot prepare stage {actor} "
                                 f"phase {ph.index}: {first_line(e)}") from None
        self.program: Program = next(p for p in compile_programs(plan) if p.element == element)
        self.trace = trace
        self.clock_offset = time.time() - time.perf_counter()  # perf_counter -> wall clock
        self._fresh()

    def _fresh(self) -> None:
        """The state of one run."""
        self.running: int | None = None  # the phase in a firing now
        self.changed = threading.Event()  # something for the driver's poll
        self.control = NodeControl(self.element_name, self.node, self.changed)
        self.thread: threading.Thread | None = None
        self.stream: Stream | None = None
        self.taken = 0  # frames its loop took
        self.delivered: collections.deque[tuple[int, float, dict | None]] = collections.deque()
        self.entered: dict[int, float] = _Entries()

    def ready(self) -> dict[str, Any]:
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "host": socket.gethostname()}

    # ---- wiring and starting ----
    def connect(self, peers: dict[str, Any], frames: int, dynamic: list[str],
                keep: Callable[[int], bool]) -> None:
        """Bind the program: its channels' ends (`peers`: element -> actor handle), its frames
        (`dynamic`: the groups the driver dispatches, in route order) and the frame source."""
        self._fresh()
        plan, prog, me = self.plan, self.program, self.element_name
        groups = {a: i for i, a in enumerate(dynamic)}
        # a route is learnt from what arrives before the frame's last send here
        sends = [a for a in prog.actions if a.kind == SEND]
        last_send = max((a.phase for a in sends), default=-1)
        self.routes = Routes(len(sends) // prog.round_frames) if dynamic else None
        windows = channel_windows(plan)
        chans: dict[str, RayChannel] = {}
        for c in plan.app.channels:
            if c.src == self.actor:
                chans[c.name] = RayChannel(c.name, windows[c.name],
                                           self._router(c.dst, peers, groups.get(c.dst)), [],
                                           self.routes)
            elif c.dst == self.actor:
                chans[c.name] = RayChannel(c.name, windows[c.name], None,
                                           [peers[el] for el in group_members(c.src)],
                                           self.routes if c.dst_phase <= last_send else None)
        self.channels = chans
        loads = any(a.tensors for a in prog.actions if a.kind == FIRE)
        self.inputs = Inputs(self.control, me, self.routes if last_send >= 0 else None) \
            if loads else None
        if self.actor in groups:
            take = lambda member: self.routes.take(self.control, me)  # noqa: E731
        else:
            take = Dispatch(list(prog.pattern) if prog.pattern else None, frames).take
        self.keep = keep
        self.worker = Worker(prog, caller_cores_of(self.runners.values(), self.element),
                             {fi.phase: fi for fi in firings(plan.app) if fi.actor == self.actor},
                             [{ph: PhaseRunner(self, ph) for ph in self.runners}], chans,
                             self._counting(take, self.actor in groups), 0, False, None)

    def _router(self, dst: str, peers: dict[str, Any], group: int | None) -> Callable[[int], Any]:
        """Frame f -> the actor handle of the member of `dst` that takes it."""
        members = [peers[el] for el in group_members(dst)]
        if len(members) == 1:
            return lambda f: members[0]
        if group is not None:
            return lambda f: members[self.routes.member(f, group)]
        pattern = self.plan.mapping.pattern(dst)
        return lambda f: members[member_of(pattern, f)]

    def _counting(self, take: Callable[[int], int | None], tell: bool
                  ) -> Callable[[int], int | None]:
        """`take`, counting the frames taken; `tell`: each take is news for the driver's poll
        (it dispatches this member's group by the frames its members took)."""
        def counted(member: int) -> int | None:
            f = take(member)
            if f is not None:
                self.taken += 1
                if tell:
                    self.changed.set()
            return f
        return counted

    def start(self) -> None:
        """Run the loop in a thread of its own (until its frames end or `stop`)."""
        self.stream = Stream(self._load, self.control, self._deliver, self.entered,
                             [] if self.trace else None)
        self.thread = threading.Thread(target=self._drive, daemon=True,
                                       name=f"hetflow-{self.element_name}")
        self.thread.start()

    def _drive(self) -> None:
        drive(self.stream, self.worker)
        self.changed.set()

    def _load(self, f: int) -> dict[str, np.ndarray]:
        return self.inputs.get(f)

    def _deliver(self, f: int, outs: dict[str, np.ndarray], by: int) -> None:
        self.delivered.append((f, time.time(), outs if self.keep(f) else None))
        self.changed.set()

    # ---- what peers and the driver send ----
    def put(self, channel: str, f: int, item: Any, route: tuple[int, ...] | None) -> None:
        self.channels[channel].receive(f, item, route)

    def credit(self, channel: str, f: int) -> None:
        self.channels[channel].credit(f)

    def feed(self, batch: list[tuple[int, dict[str, np.ndarray], tuple[int, ...] | None]]
             ) -> None:
        self.inputs.give(batch)

    def give(self, frames: list[int], last: bool) -> None:
        self.routes.give(frames, last)

    # ---- what the driver asks ----
    def poll(self, timeout: float) -> dict[str, Any]:
        """What happened since the last poll, once there is news (a frame delivered, a frame
        taken by a member of a dynamic group, a fault, the stop) or after `timeout` s: frames
        delivered (frame, wall-clock time, outputs if kept), frames started (frame -> wall-clock
        time; they are news only at the end, for the latencies), frames taken so far, the first
        fault."""
        self.changed.wait(timeout)
        self.changed.clear()
        delivered = [self.delivered.popleft() for _ in range(len(self.delivered))]
        return {"delivered": delivered, "entered": self._entries(), "taken": self.taken,
                "fault": self.control.faults[0] if self.control.faults else None}

    def _entries(self) -> dict[int, float]:
        """The frames started since they were last asked for (wall-clock times); a poll and
        the stop may ask at once."""
        out = {}
        for f in list(self.entered):
            t = self.entered.pop(f, None)
            if t is not None:
                out[f] = t + self.clock_offset
        return out

    def waits(self) -> str:
        """What its loop waits on now, for a stall's message."""
        where = f"{self.element_name} (node {self.node})"
        what = self.control.waiting.get(self.element_name, "running")
        if self.thread is not None and not self.thread.is_alive():
            return f"{where} has finished its frames"
        if self.running is not None:
            return f"{where} has not finished stage {self.actor} phase {self.running}"
        if what == "running":
            return f"{where} runs (between firings)"
        return f"{where} waits on {what}"

    def stop(self) -> dict[str, Any]:
        """Stop the loop; its busy seconds, frames taken and trace events (wall-clock times)."""
        self.control.stop.set()
        self.changed.set()
        if self.thread is not None:
            self.thread.join(JOIN)
        busy = sum(self.stream.busy.values()) if self.stream else 0.0
        off = self.clock_offset
        events = [ev[:4] + (ev[4] + off, ev[5] + off)
                  for ev in (self.stream.events or [])] if self.stream else []
        return {"busy": busy, "taken": self.taken, "events": events, "entered": self._entries()}


class _Entries(dict):
    """Frame -> when it started here (perf_counter), NaN for one not started: the loop's
    `first_start`, holding only the frames the driver has not yet been told of."""

    def __missing__(self, f: int) -> float:
        return math.nan
