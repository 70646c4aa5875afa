"""The one firing loop: a worker runs its compiled actions (`runtime.program`) on its frames.

`lane_loop` runs one lane's actions as a generator that yields where it must wait: a frame not
yet in a channel, no room in one, a frame yet to arrive, or a run launched on a device. `drive`
is a worker's thread: it resumes whichever of its lanes' waits is over and, when none is, waits
on the oldest run in flight, else on a channel or a frame's arrival. A CPU worker has one lane
that yields only to wait; a GPU worker with k lanes keeps up to k runs in flight (launch on
every free lane, wait for the oldest, deliver). Every design runs through these two functions,
the parallel copies' (fire the whole model, deliver: a lane that never yields) included.
A batched worker's lanes run `batch_lane_loop`, which gathers up to b frames before a firing.

Several applications at once (`hetflow run-multi`) run on the same loop: `drive_shared` is an
element's one thread over the lanes of every application's worker there. Their lanes yield a
turn before each firing (`Worker.turns`), and the driver gives the turn to the lane of the
highest-priority application that can go on: fixed priority, non-preemptive at the granularity
of one firing (a lower-priority firing under way blocks a higher-priority frame for at most
that firing, as the schedulability analysis assumes). On a device element the k lanes are the
element's: at most k firings of all its applications are in flight, and a lane that frees goes
to the highest-priority turn (batched lanes take turns too). A worker alone keeps `drive`.
"""
from __future__ import annotations

import collections
import math
import functools
import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from hetflow.runtime.channel import Channel
from hetflow.runtime.harness import POLL, Control, Stopped, fault_text
from hetflow.plan.program import DELIVER, FIRE, RECV, SEND, Program, batch_phases, rounds
from hetflow.plan.schedule import Firing
from hetflow.backends import pin_current_thread

ARRIVAL_POLL = 0.0002  # s: how often a device's driver with a free lane looks for the
# next frame's arrival while its oldest run is still in flight
GET, PUT, ARRIVE, DEVICE = "get", "put", "arrive", "device"  # what a lane waits on
TURN = "turn"  # a lane of a shared element, ready to fire: (TURN, the firing, frame, "")
# a batched lane's wait for the next frame of a partial batch: (DUE, (deadline, GET | ARRIVE,
# the channel or None), frame, what): over at the deadline or once the inner wait is
DUE = "due"


@dataclass
class Stream:
    """What every worker of a run shares."""

    inputs: Callable[[int], dict[str, np.ndarray]]
    control: Control
    deliver: Callable[[int, dict, int], None]  # (frame, outputs, index of the delivering element)
    first_start: list[float]  # when each frame entered (its arrival, or its first load);
    # a list: read and written a firing at a time, where a list's item is cheaper than an array's
    events: list | None = None  # trace events (worker, actor, phase, frame, start, end): a
    # list, or what takes `append` and `+=` as one (the multi-CNN engines sum each frame's)
    arrive_at: np.ndarray | None = None  # absolute arrival times; None: all there at once
    busy: dict[tuple[str, int], float] = field(default_factory=dict)  # (element, lane) -> s
    # a batch's frames handed on at once: (frames, their outputs, index); None: `deliver`
    # frame by frame
    deliver_frames: Callable[[list[int], list[dict], int], None] | None = None


@dataclass
class Worker:
    """A program bound to its element's runners and the run's channels."""

    program: Program
    cores: list[int]  # where its driving thread runs
    firings: dict[int, Firing]  # phase -> what it fires
    runners: list[dict[int, Any]]  # lane -> phase -> runner
    channels: dict[str, Channel]
    take: Callable[[int], int | None]  # the group's dispatch: its next frame
    index: int  # among the elements that deliver (the report's per-element split)
    on_device: bool  # its runners launch (submit / finished / collect) rather than run
    wake: threading.Event | None = None  # set by its channels (a laned worker's)
    # the group's dispatch handing a batched lane up to n frames at once: (member, n) -> frames
    # (None: `take`, a frame at a time)
    take_block: Callable[[int, int], list[int]] | None = None
    turns: bool = False  # its lanes yield a turn before each firing (a shared element's)

    def bound(self, lane: int) -> list[tuple]:
        """The program's actions with their channel or runner: (kind, a, b, c)."""
        out = []
        for act in self.program.actions:
            if act.kind == FIRE:
                out.append((FIRE, self.firings[act.phase], self.runners[lane][act.phase],
                            act.tensors))
            elif act.kind in (RECV, SEND):
                what = (f"channel {act.channel} (from {act.peer})" if act.kind == RECV
                        else f"space in channel {act.channel} (to {act.peer})")
                out.append((act.kind, self.channels[act.channel], act.tensors[0], what))
            else:
                out.append((DELIVER, act.tensors, None, None))
        return out

    def frames(self) -> Iterator[int]:
        """Its frames, as the group's dispatch hands them out (a C-level iterator)."""
        return iter(functools.partial(self.take, self.program.member), None)

    def block(self, n: int) -> list[int]:
        """Up to `n` of its next frames, taken at once where the dispatch hands out blocks;
        [] when it has none left."""
        if self.take_block is not None:
            return self.take_block(self.program.member, n)
        f = self.take(self.program.member)
        return [] if f is None else [f]


def lane_loop(s: Stream, w: Worker, lane: int, me: str) -> Iterator[tuple]:
    """Lane `lane` of worker `w` runs its actions, yielding (GET | PUT | ARRIVE | DEVICE, the
    channel or runner, frame, what it waits on) where it must wait; the driver resumes it once
    that is over. A failure stops the run naming the element, lane, stage, phase and layers."""
    prog, control, stop, deliver = w.program, s.control, s.control.stop, s.deliver
    inputs, first_start, arrive_at, events = s.inputs, s.first_start, s.arrive_at, s.events
    clock, on_device, index, span = time.perf_counter, w.on_device, w.index, prog.span
    turns = w.turns
    ring: list[dict[str, Any]] = [{} for _ in range(span)]  # tensors of the frames under way
    acts = [(act.slot, *item) for act, item in zip(prog.actions, w.bound(lane))]
    spent, firing = 0.0, None
    try:
        for base, got in rounds(prog, w.frames()):
            have = len(got)
            for slot, kind, a, b, c in acts:
                n = base + slot
                if n < 0 or n >= have:  # before its first frame or after its last
                    continue
                f, local = got[n], ring[n % span]
                if kind is FIRE:  # a: the firing, b: its runner, c: model inputs to load first
                    firing = a
                    if c:
                        while arrive_at is not None and clock() < arrive_at[f]:
                            yield ARRIVE, None, f, f"frame {f}'s arrival"
                        try:
                            x = inputs(f)
                        except BaseException as e:
                            control.fail(f"frame source, frame {f}: {type(e).__name__}: {e}")
                            return
                        for t in c:
                            local[t] = x[t]
                    if turns:  # its inputs are there: the element's driver says when
                        yield TURN, a, f, ""
                    t0 = clock()
                    if c and first_start[f] != first_start[f]:  # not yet entered (NaN)
                        first_start[f] = t0 if arrive_at is None else arrive_at[f]
                    feeds = {t: local[t] for t in a.inputs}
                    if on_device:
                        b.submit(feeds)
                        yield DEVICE, b, f, ""
                        out = b.collect()
                    else:
                        out = b.run(feeds)
                    t1 = clock()
                    spent += t1 - t0
                    if events is not None:
                        events.append((me, prog.actor, a.phase, f, t0, t1))
                    local.update(out)
                elif kind is RECV:  # a: the channel, b: the tensor, c: what a wait is on
                    ok, item = a.try_get(f)
                    while not ok:
                        yield GET, a, f, c
                        ok, item = a.try_get(f)
                    local[b] = item
                elif kind is SEND:
                    item = local[b]
                    while not a.try_put(f, item):
                        yield PUT, a, f, c
                else:  # DELIVER, a: the model outputs it hands on
                    if a:
                        deliver(f, {t: local[t] for t in a}, index)
                    local.clear()
                    if stop.is_set():
                        return
    except GeneratorExit:  # closed by its driver: the run stopped
        raise
    except BaseException as e:  # any failure stops the whole run, naming where it happened
        _fail(control, prog, lane, firing, e)
    finally:
        s.busy[(prog.element, lane)] = spent


def batch_lane_loop(s: Stream, w: Worker, lane: int, me: str) -> Iterator[tuple]:
    """Lane `lane` of batched worker `w` (`program.batch` b > 1): it takes the frames its batch
    lacks in one block (`Worker.block`) and gathers their first phase's inputs until b frames
    are there, the oldest has waited `batch_wait` s since its arrival, or the frames end (late
    ones open the next batch); then phase by phase it receives each frame's inputs, fires once
    on them all (`run_frames`, or `submit_frames`/`collect_frames` on a laned device), sends
    and delivers each frame. It yields where it must wait, as `lane_loop` does."""
    prog, control, stop = w.program, s.control, s.control.stop
    arrive_at, events = s.arrive_at, s.events
    clock, on_device, index, b, patience = (time.perf_counter, w.on_device, w.index,
                                             prog.batch, prog.batch_wait)
    phases = [(pre, fire, post, w.firings[fire.phase], w.runners[lane][fire.phase])
              for pre, fire, post in batch_phases(prog)]
    first_recv, loads = phases[0][0], phases[0][1].tensors
    spent, firing = 0.0, None
    # frames taken, oldest first, with what was gathered of them, not yet in a batch
    taken: collections.deque[tuple[int, dict]] = collections.deque()

    needed = {*loads[:1], *(a.tensors[0] for a in first_recv)}  # a frame's, to join a batch
    # every frame's inputs are there (no clock, no channel into the first phase): a batch is
    # its block of frames loaded at once (`load_block`), no gathering frame by frame
    at_once = bool(loads) and arrive_at is None and not first_recv
    # what a phase's run takes and gives as they are: its inputs the frames' loads, its
    # outputs what it delivers and nothing else (a whole model's lane: no dict a frame)
    as_loaded, as_given = _as_they_are(phases, loads, at_once)
    try:
        while True:
            batch: list[tuple[int, dict]] = []  # (frame, its tensors) in the order taken
            due = None  # when the oldest frame of the batch has waited long enough
            if at_once:
                try:
                    batch = _load_block(s, loads, w.block(b))
                except (GeneratorExit, Stopped):
                    raise
                except _SourceFault as e:
                    control.fail(str(e))
                    return
            while len(batch) < b and not at_once:
                if not taken:
                    taken.extend((f, {}) for f in w.block(b - len(batch)))
                    if not taken:  # the stream's end
                        break
                f, local = taken[0]
                try:
                    yield from _gather(s, w, loads, first_recv, f, local, due)
                except (GeneratorExit, Stopped):
                    raise
                except BaseException as e:
                    control.fail(f"frame source, frame {f}: {type(e).__name__}: {e}")
                    return
                if not needed <= local.keys():  # waited enough: it fires without f
                    break
                taken.popleft()
                if due is None:  # its arrival at the element
                    due = (arrive_at[f] if arrive_at is not None and loads else clock()) \
                        + patience
                batch.append((f, local))
            if not batch:
                return
            fs = [f for f, _ in batch]
            for n, (pre, fire, post, a, runner) in enumerate(phases):
                firing = a
                yield from _receive(w, pre if n else (), batch)
                feeds = ([local for _, local in batch] if as_loaded[n] else
                         [{t: local[t] for t in a.inputs} for _, local in batch])
                if w.turns:  # its inputs are there: the element's driver says when
                    yield TURN, a, fs[0], ""
                t0 = clock()
                if on_device:
                    runner.submit_frames(feeds)
                    yield DEVICE, runner, fs[0], ""
                    outs = runner.collect_frames()
                else:
                    outs = runner.run_frames(feeds)
                t1 = clock()
                spent += t1 - t0
                if events is not None:
                    events += [(me, prog.actor, a.phase, f, t0, t1) for f in fs]
                if as_given[n]:  # handed on as the run gave them
                    _hand_on_given(s, fs, outs, index)
                    continue
                for (_, local), out in zip(batch, outs):
                    local.update(out)
                for pa in post:
                    if pa.kind == SEND:
                        ch, t = w.channels[pa.channel], pa.tensors[0]
                        for f, local in batch:
                            while not ch.try_put(f, local[t]):
                                yield PUT, ch, f, f"space in channel {pa.channel} (to {pa.peer})"
                    else:  # DELIVER
                        _hand_on(s, fs, batch, pa.tensors, index)
            if stop.is_set():
                return
    except GeneratorExit:  # closed by its driver: the run stopped
        raise
    except BaseException as e:  # any failure stops the whole run, naming where it happened
        _fail(control, prog, lane, firing, e)
    finally:
        s.busy[(prog.element, lane)] = spent


def _as_they_are(phases: list[tuple], loads: tuple[str, ...], at_once: bool
                 ) -> tuple[list[bool], list[bool]]:
    """Per phase of a batched lane: whether its run takes the frames' loads as they are (the
    first phase, every input loaded and nothing else), and whether what its run gives is
    handed on as it is (its outputs exactly what it delivers, nothing sent): a whole model's
    lane then builds no dict a frame."""
    as_loaded = [n == 0 and at_once and set(a.inputs) == set(loads)
                 for n, (_, _, _, a, _) in enumerate(phases)]
    as_given = [[pa.kind for pa in post] == [DELIVER] and bool(post[0].tensors)
                and set(getattr(runner, "outputs", ())) == set(post[0].tensors)
                for _, _, post, _, runner in phases]
    return as_loaded, as_given


def _load(s: Stream, loads: tuple[str, ...], f: int, local: dict) -> None:
    """Frame f's model inputs `loads` into `local`; it enters now (or at its arrival)."""
    x = s.inputs(f)
    for t in loads:
        local[t] = x[t]
    if s.first_start[f] != s.first_start[f]:  # not yet entered (NaN)
        s.first_start[f] = time.perf_counter() if s.arrive_at is None else s.arrive_at[f]


def _load_block(s: Stream, loads: tuple[str, ...], fs: list[int]) -> list[tuple[int, dict]]:
    """Frames `fs` with their model inputs `loads`, entered now (a frame the source fails on
    raises _SourceFault naming it)."""
    out, inputs, first_start = [], s.inputs, s.first_start
    for f in fs:
        try:
            x = inputs(f)
        except BaseException as e:
            raise _SourceFault(f"frame source, frame {f}: {type(e).__name__}: {e}") from e
        out.append((f, {t: x[t] for t in loads}))
    now = time.perf_counter()
    for f in fs:
        if first_start[f] != first_start[f]:  # not yet entered (NaN)
            first_start[f] = now
    return out


def _gather(s: Stream, w: Worker, loads: tuple[str, ...], first_recv, f: int, local: dict,
            due: float | None) -> Iterator[tuple]:
    """Frame f's first-phase inputs (its `loads`, what `first_recv` brings) into `local`;
    stops early (leaving `local` short) once `due` passes with an input not yet there."""
    clock, arrive_at = time.perf_counter, s.arrive_at
    if loads and not local:
        while arrive_at is not None and clock() < arrive_at[f]:
            if due is not None and clock() >= due:
                return
            yield ((DUE, (due, ARRIVE, None), f, f"frame {f}'s arrival") if due is not None
                   else (ARRIVE, None, f, f"frame {f}'s arrival"))
        _load(s, loads, f, local)
    for a in first_recv:
        t = a.tensors[0]
        if t in local:
            continue
        ch = w.channels[a.channel]
        ok, item = ch.try_get(f)
        while not ok:
            if due is not None and clock() >= due:
                return
            what = f"channel {a.channel} (from {a.peer})"
            yield (DUE, (due, GET, ch), f, what) if due is not None else (GET, ch, f, what)
            ok, item = ch.try_get(f)
        local[t] = item


def _receive(w: Worker, actions, batch: list[tuple[int, dict]]) -> Iterator[tuple]:
    """Each frame of a batch receives what `actions` (a phase's receives) bring it, waiting
    (yielding GET) where it is not yet in its channel."""
    for pa in actions:
        ch, t = w.channels[pa.channel], pa.tensors[0]
        for f, local in batch:
            ok, item = ch.try_get(f)
            while not ok:
                yield GET, ch, f, f"channel {pa.channel} (from {pa.peer})"
                ok, item = ch.try_get(f)
            local[t] = item


def _hand_on(s: Stream, fs: list[int], batch: list[tuple[int, dict]], tensors: list[str],
             index: int) -> None:
    """A batch's frames' (`fs`) model outputs `tensors` to the stream, at once where it takes
    them so (at tens of thousands of frames a second the driving thread's time a frame bounds a
    batched GPU); each frame's tensors are then let go."""
    if tensors:
        _hand_on_given(s, fs, [{t: local[t] for t in tensors} for _, local in batch], index)
    for _, local in batch:
        local.clear()


def _hand_on_given(s: Stream, fs: list[int], outs: list[dict], index: int) -> None:
    """A batch's frames' (`fs`) outputs to the stream as the run gave them (`outs`: each
    frame's model outputs and nothing else)."""
    if s.deliver_frames is not None:
        s.deliver_frames(fs, outs, index)
    else:
        for f, out in zip(fs, outs):
            s.deliver(f, out, index)


class _SourceFault(Exception):
    """The frame source failed on a frame (the message names it)."""


def _fail(control, prog, lane: int, firing, e: BaseException) -> None:
    """Stop the run with `e`, naming the element, the lane (where it has several) and the
    firing it was in (else its stage)."""
    where = firing.where if firing is not None else f"stage {prog.actor}"
    control.fail(fault_text(prog.element, f"lane {lane}, {where}" if prog.lanes > 1 else where, e))


def _over(kind: str, obj: Any, f: int, arrive_at: np.ndarray | None) -> bool:
    """Whether a lane's wait is over: its frame in the channel, room in it, or its arrival (or,
    for a partial batch, its deadline)."""
    if kind == GET:
        return obj.has(f)
    if kind == PUT:
        return obj.has_room(f)
    if kind == DUE:
        due, inner, ch = obj
        return time.perf_counter() >= due or _over(inner, ch, f, arrive_at)
    return time.perf_counter() >= arrive_at[f]


def _due(wait: tuple, arrive_at: np.ndarray | None) -> float | None:
    """When a wait is over at the latest (a frame's arrival, a partial batch's deadline)."""
    if wait[0] == ARRIVE:
        return arrive_at[wait[2]]
    if wait[0] == DUE:
        due, inner, _ = wait[1]
        return min(due, arrive_at[wait[2]]) if inner == ARRIVE else due
    return None


def _wait_once(s: Stream, oldest_run: Any, waits: list[tuple], me: str,
               wake: threading.Event | None) -> None:
    """Block until a wait may be over (at most POLL for a channel, up to the next arrival for a
    frame yet to arrive), saying what the lowest frame waits on; Stopped once the run stops.
    The oldest run in flight on a device is waited for first; else, with several lanes, `wake`
    (set by the lanes' channels on every put and take), else the one wait."""
    control = s.control
    if control.stop.is_set():
        raise Stopped
    due = [d for w in waits if (d := _due(w, s.arrive_at)) is not None]
    ahead = max(0.0, min(due) - time.perf_counter()) if due else POLL
    if oldest_run is not None:
        if not due:
            oldest_run.wait()
        elif not oldest_run.finished():  # whichever comes first: the run's end or a frame
            time.sleep(min(ahead, ARRIVAL_POLL))
        return
    kind, ch, f, what = min(waits, key=lambda w: w[2])
    control.waiting[me] = what
    limit = min(POLL, ahead)
    if kind == DUE:
        _, kind, ch = ch
    if wake is not None:
        wake.wait(limit)
    elif kind == ARRIVE:
        control.stop.wait(limit)
    elif kind == GET:
        ch.wait_for(f, limit)
    else:
        ch.wait_space(f, limit)


def drive(s: Stream, w: Worker) -> None:
    """Worker `w`'s thread. Its lanes (k > 1: a GPU's runners, each its own stream) are driven
    by this one thread, up to k runs in flight: it resumes whichever lane's wait is over and,
    when none is, waits on the oldest run in flight, else on a channel. One thread per GPU
    measured steadier and faster than a thread per lane on the H100 machine (several sleeping
    threads on one driving core wake late by turns). Runs are looked at in launch order,
    stopping at the first not finished, as `backends.inflight` collects them: asking each
    lane's run at every step cost the driving thread tens of microseconds a frame at 16-24
    lanes."""

    el, k, control = w.program.element, w.program.lanes, s.control
    loop = batch_lane_loop if w.program.batch > 1 else lane_loop
    gens = [loop(s, w, lane, f"{el}/lane{lane}" if k > 1 else el) for lane in range(k)]
    in_flight: collections.deque[tuple[int, Any]] = collections.deque()  # (lane, runner)
    waits: dict[int, tuple] = {}  # lane -> what it waits on

    def resume(i: int) -> None:
        wait = next(gens[i], None)
        if wait is None:
            return
        if wait[0] == DEVICE:  # launched: its runs are looked at in launch order
            in_flight.append((i, wait[1]))
        else:
            waits[i] = wait

    try:
        pin_current_thread(w.cores)
        for i in range(k):
            resume(i)
        while in_flight or waits:
            moved = False
            if w.wake is not None:
                w.wake.clear()  # before looking: a change after this sets it again
            while in_flight and in_flight[0][1].finished():
                moved = True
                control.waiting[el] = "running"  # before the firing: it may hang
                resume(in_flight.popleft()[0])
            for i, (kind, obj, f, _) in list(waits.items()) if waits else ():
                if _over(kind, obj, f, s.arrive_at):
                    moved = True
                    control.waiting[el] = "running"
                    del waits[i]
                    resume(i)
            if not moved:
                _wait_once(s, in_flight[0][1] if in_flight else None, list(waits.values()),
                           el, w.wake)
    except Stopped:
        return
    except BaseException as e:  # noqa: BLE001 - a failure outside any firing
        control.fail(fault_text(el, f"stage {w.program.actor}", e))
    finally:
        for _, runner in in_flight:  # a run left in flight by a stop: free the lane again
            with contextlib.suppress(Exception):
                runner.collect_frames() if w.program.batch > 1 else runner.collect()
        for g in gens:
            g.close()


@dataclass
class Tenant:
    """One application's worker on a shared element, as `drive_shared` drives it."""

    name: str  # the application's
    stream: Stream
    worker: Worker


@dataclass
class Dispatched:
    """How long an element's firings waited for its driver: from when each could start (its
    frame's arrival where it waited for one, else its lane's turn; or the end of the firing
    before it, whichever came later) to its start (the driver's wake-up included)."""

    delay: float = 0.0
    turns: int = 0


def drive_shared(element: str, tenants: list[Tenant], control: Control, wake: threading.Event,
                 cores: list[int], dispatched: Dispatched, spin: float = 0.0,
                 shared_lanes: bool = True) -> None:
    """The one thread of `element`, shared by several applications' workers (`tenants`, highest
    priority first, each with `turns`): it resumes the lane of the highest-priority application
    whose wait is over, one resume at a time (a resume runs at most one firing: the lane yields
    its turn before the next), then looks again from the top; when no wait is over, it waits on
    the oldest run in flight on a device, else on `wake` (set by every channel the tenants use
    and by their frames' admission) until the next arrival, at most POLL. Their runs in flight
    are looked at in launch order, as `drive` does, where one application has them; with
    several, every run is (see `apart`). The last `spin` seconds before an arrival
    are spun, not slept, and so are runs in flight (a thread alone in its process: a sleeping
    one wakes late).
    `shared_lanes`: a device element's lanes are the element's (below); else each tenant's
    own, every tenant's k lanes in flight at once."""
    clock = time.perf_counter
    gens, names, arrive, batched, device = [], [], [], [], []
    # a device element's lanes are the element's, not each application's: at most `lanes`
    # firings in flight among all of them, a free lane going to the highest priority ready
    # (the k-server model of multi.schedulability)
    laned = [t.worker.program.lanes for t in tenants if t.worker.on_device]
    lanes = (max(laned, default=0) if shared_lanes else sum(laned))
    for t in tenants:
        w, k = t.worker, t.worker.program.lanes
        loop = batch_lane_loop if w.program.batch > 1 else lane_loop
        for lane in range(k):
            gens.append(loop(t.stream, w, lane, f"{element}/lane{lane}" if k > 1 else element))
            names.append(t.name)
            arrive.append(t.stream.arrive_at)
            batched.append(w.program.batch > 1)
            device.append(w.on_device)
    n = len(gens)
    waits: list[tuple | None] = [None] * n  # what each lane waits on (None: none)
    since = [0.0] * n  # when a lane's turn came
    in_flight: collections.deque[tuple[int, Any]] = collections.deque()  # (lane, runner)
    free_at = 0.0  # when the element's last firing ended

    def resume(i: int) -> None:
        wait = next(gens[i], None)
        if wait is not None and wait[0] == DEVICE:
            in_flight.append((i, wait[1]))
            wait = None
        elif wait is not None and wait[0] is TURN:
            since[i] = clock()
        waits[i] = wait

    def over(i: int) -> bool:
        w = waits[i]
        if w is None:
            return False
        if w[0] is TURN:
            return not device[i] or len(in_flight) < lanes
        return _over(w[0], w[1], w[2], arrive[i])

    # several applications' runs on a device: a short firing of one ends before a long one
    # of another launched earlier, so every run is looked at, not only the oldest (which would
    # hold the short one's frame until the long one ends)
    apart = len({names[i] for i in range(n) if device[i]}) > 1

    try:
        pin_current_thread(cores)
        for i in range(n):
            resume(i)
        while in_flight or any(w is not None for w in waits):
            wake.clear()  # before looking: a change after this sets it again
            moved = False
            if apart:
                done = [run for run in in_flight if run[1].finished()]
                for run in done:
                    in_flight.remove(run)
                    resume(run[0])
                moved = bool(done)
            else:
                while in_flight and in_flight[0][1].finished():
                    moved = True
                    resume(in_flight.popleft()[0])
            i = next((i for i in range(n) if over(i)), None)
            if i is not None:
                moved = True
                kind, obj, f, what = waits[i]
                waits[i] = None
                if kind is TURN:  # named while it runs: a fault or a stall names it
                    control.waiting[element] = (f"application {names[i]}, stage {obj.actor} "
                                                f"phase {obj.phase}, frame {f}")
                    now = clock()
                    dispatched.delay += max(0.0, now - max(since[i], free_at))
                    dispatched.turns += 1
                    resume(i)
                    free_at = clock()
                else:  # after an arrival, the firing it lets go was ready from then
                    was = _due((kind, obj, f, what), arrive[i])
                    resume(i)
                    if was is not None and waits[i] is not None and waits[i][0] is TURN:
                        since[i] = min(since[i], was)
            if not moved:
                _wait_shared(control, element, waits, names, arrive, wake,
                             in_flight[0][1] if in_flight else None, spin, apart)
    except Stopped:
        return
    except BaseException as e:  # noqa: BLE001 - a failure outside any firing
        control.fail(fault_text(element, "its driver", e))
    finally:
        for i, runner in in_flight:  # a run left in flight by a stop: free the lane again
            with contextlib.suppress(Exception):
                runner.collect_frames() if batched[i] else runner.collect()
        for g in gens:
            g.close()


def _wait_shared(control: Control, element: str, waits: list[tuple | None], names: list[str],
                 arrive: list, wake: threading.Event, oldest_run: Any, spin: float,
                 poll: bool = False) -> None:
    """Block until a wait of a shared element's lanes may be over: the oldest run in flight
    first (polling for arrivals due meanwhile; with `poll`, for any run's end too: runs of
    several applications end out of order), else `wake` until `spin` seconds before the next
    arrival due (then not at all), at most POLL; says what each application's lanes wait on.
    With `spin`, runs in flight are polled without sleeping. Stopped once the run stops. A
    frame not yet admitted (its arrival unknown: infinite) is waited for on `wake`, which
    admits it."""
    if control.stop.is_set():
        raise Stopped
    due = [d for w, a in zip(waits, arrive) if w is not None
           and (d := _due(w, a)) is not None and d != math.inf]
    ahead = max(0.0, min(due) - time.perf_counter()) if due else POLL
    if oldest_run is not None:
        if not due and not poll:
            oldest_run.wait()
        elif not oldest_run.finished():
            # a thread alone in its process (`spin`) yields instead: on the GPU machine (a
            # virtual machine) a 0.2 ms sleep of the driver's core took up to 3.4 ms to return,
            # a few times a minute, the thread off the CPU throughout (its core woken late)
            time.sleep(0.0 if spin else min(ahead, ARRIVAL_POLL))
        return
    if due and ahead <= spin:
        return
    said = ", ".join(dict.fromkeys(  # each application's waits, highest priority first
        "waiting for the next release" if w[0] == ARRIVE
        else f"application {name}, waiting for {w[3]}"
        for w, name in zip(waits, names) if w is not None))
    if control.waiting.get(element) != said:
        control.waiting[element] = said
    wake.wait(min(POLL, ahead - spin if due else ahead))
