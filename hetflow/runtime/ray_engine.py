"""Run a plan's CSDF application on Ray: one Ray actor per processing element, on its node.

Mirrors the local engine (`hetflow.runtime.engine`): an actor replicated on k elements has k
workers; with static dispatch member `pattern[f % len(pattern)]` takes frame f, with dynamic
dispatch (the default) the least-loaded member does; each worker fires its actor's phases in
Algorithm 2's cyclic order, frame by frame or in the plan's interleaved order
(`runtime.program`), keeps the tensors a later phase of the same frame reads in its own
memory, and receives the others through channels; outputs are collected in input order and
checked against the same reference.

Channels are Ray object references. The driver submits one actor task per phase firing, the
workers' orders merged so that each firing comes after those it reads from
(`schedule.submission_order`: frame by frame, a topological order of the phase graph), passing
the producing tasks' return refs as arguments of the consuming tasks. Ray then moves each tensor straight from the producer's node
to the consumer's (shared memory within a node); the driver only handles references. Two Ray
guarantees give the local engine's semantics:
- tasks a caller submits to one actor run in submission order, and an actor task waits for its
  argument objects: so each worker runs (frame, phase) in the same order as a local worker, and
  a phase starts when its channel inputs exist, as a FIFO read would;
- at most `max_inflight` frames are submitted and not yet collected: the bounded FIFOs' back
  pressure, counted in frames (see `frames_in_flight`).

Why not Ray compiled graphs: a compiled graph runs every node once per `execute`, but a replica
group's member takes only some frames (by a pattern, or dynamically), and its zero-copy channel
buffers may not be held across executions while a worker keeps tensors for later phases. Where
it fits (no replica groups) it measured slower than plain calls on a 2-core machine
(docs/ray.md has the figures).

Faults: every wait on Ray has a timeout. A phase that raises stops the run with RuntimeFault
naming element, node, stage, phase and layers; a lost actor or node stops it naming the element
and node (found by pinging every worker); no frame completed for `stall_timeout` seconds stops
it naming the tasks that have not finished. Ctrl-C returns what was measured so far.
"""
from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from hetflow import interrupt
from hetflow.errors import InputError, RuntimeFault, first_line
from hetflow.plan.orders import frames_ahead
from hetflow.plan.mapping import group_members
from hetflow.plan.plan import Plan
from hetflow.model.graph import CnnGraph

from hetflow.runtime.harness import fault_text
from hetflow.runtime.report import RunReport, stream_report
from hetflow.plan.program import FIRE, compile_programs, worker_actions
from hetflow.plan.schedule import Firing, firings, frames_in_flight, member_of, submission_order
import onnx
import os
import socket
from hetflow.backends import backend_for, pin_current_thread
from hetflow.model.subnet import Subnet, extract_subnet
from hetflow.platform.cluster import PLACEMENT_SHARE, node_resource, split_element

RAY_MISSING = "--engine ray needs Ray: pip install 'hetflow[ray]'"
POLL = 0.05
PING_TIMEOUT = 5.0


def import_ray():
    """The `ray` module, or the InputError saying how to get it."""
    try:
        import ray
    except ImportError:
        raise InputError(RAY_MISSING) from None
    return ray


@contextlib.contextmanager
def ray_session(address: str | None = None) -> Iterator[Any]:
    """Use the Ray connection this process has; else connect to `address` ('auto', 'ray://h:p',
    'h:p') or, with None, start a local Ray instance; disconnect at the end if we connected."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    try:
        with interrupt.foreign_handlers():  # Ray's init installs its own SIGTERM handler
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.WARNING)
    except KeyboardInterrupt:
        ray.shutdown()  # the processes it started
        raise
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = address or "a new local instance"
        raise InputError(f"--address {where}: cannot start or reach Ray "
                         f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def element_placement(plan: Plan, element: str) -> dict[str, float]:
    """Ray resources that put `element`'s worker on its node: those the element carries (a
    cluster element), else the `hetflow_node_<node>` convention for `node:element` names;
    {} for a plain name (the worker then runs on the driver's node)."""

    res = dict(plan.elements[element].resources) if element in plan.elements else {}
    node, _ = split_element(element)
    ray_res = {k: v for k, v in res.items() if k.startswith(("hetflow_node_", "node:"))}
    if ray_res:
        return ray_res
    return {node_resource(node): PLACEMENT_SHARE} if node else {}


# ---- the worker: one Ray actor per element ------------------------------------------------------
class StageFault(Exception):
    """A phase failed inside a worker; the message names element, node, stage, phase, layers."""


class ElementWorker:
    """Builds the runners of its actor's phases on its element, then fires them on request."""

    def __init__(self, plan_dict: dict, actor: str, element: str, node: str,
                 subnets: dict[int, bytes], trace: bool = False):


        self.plan = Plan.from_dict(plan_dict)
        self.actor, self.element_name, self.node = actor, element, node
        self.element = self.plan.elements[element]
        self.phases = self.plan.app.phases[actor]
        self.firings = {f.phase: f for f in firings(self.plan.app) if f.actor == actor}
        pin_current_thread(self.element.cores)
        self.runners = {}
        for ph in self.phases:
            model = onnx.load_from_string(subnets[ph.index])
            sub = Subnet(f"{actor}#{ph.index}", tuple(ph.layers), model,
                         [i.name for i in model.graph.input], [o.name for o in model.graph.output],
                         {"bytes": subnets[ph.index]})
            try:
                self.runners[ph.index] = backend_for(self.element).prepare(sub, self.element)
            except Exception as e:
                raise StageFault(f"element {element} (node {node}): cannot prepare stage {actor} "
                                 f"phase {ph.index}: {first_line(e)}") from None
        self.local: dict[int, dict[str, np.ndarray]] = {}  # frame -> tensors kept between phases
        self.busy = 0.0
        self.trace = trace
        self.events: list[tuple] = []
        self.failed: str | None = None  # the first failure: later firings repeat it

    def ready(self) -> dict[str, Any]:

        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "host": socket.gethostname()}

    def fire(self, frame: int, phase: int, *arrays: np.ndarray):
        """Run one phase of frame `frame`. Returns (start, end) wall-clock stamps followed by
        the tensors the firing sends on (a single stamp when it sends none)."""
        if self.failed:  # a later phase would fail for want of tensors: name the first cause
            raise StageFault(self.failed)
        f = self.firings[phase]
        ph = self.phases[phase]
        local = self.local.setdefault(frame, {})
        local.update(zip(f.source_inputs + f.recv_tensors, arrays))
        wall = time.time()
        t0 = time.perf_counter()
        try:
            out = self.runners[phase].run({t: local[t] for t in ph.inputs})
        except Exception as e:
            self.failed = fault_text(f"{self.element_name} (node {self.node})",
                                     f"{f.where}, frame {frame}", e)
            raise StageFault(self.failed) from None
        t1 = time.perf_counter()
        self.busy += t1 - t0
        stamp = (wall, wall + (t1 - t0))
        if self.trace:
            self.events.append((self.element_name, self.actor, phase, frame) + stamp)
        local.update(out)
        sent = [local[t] for t in f.returns]
        if f.last:
            del self.local[frame]
        return (stamp, *sent) if sent else stamp

    def stats(self) -> dict[str, Any]:
        return {"busy": self.busy, "events": self.events}


def _root(e: BaseException) -> BaseException:
    """The error at the end of a Ray error's chain of causes (a worker's own exception)."""
    while getattr(e, "cause", None) is not None and e.cause is not e:
        e = e.cause
    return e


_REMOTE_CLS = None


def _remote_worker_class(ray):
    global _REMOTE_CLS
    if _REMOTE_CLS is None:
        _REMOTE_CLS = ray.remote(ElementWorker)
    return _REMOTE_CLS


# ---- the driver ---------------------------------------------------------------------------------
@dataclass
class _Worker:
    element: str
    actor: str
    node: str  # hetflow node name ('local' for plain element names)
    handle: Any
    info: dict[str, Any]


@dataclass
class _Frame:
    frame: int
    tasks: list[tuple[Firing, int, Any]]  # (firing, member, stamp ref), as handed out
    outputs: dict[str, Any]  # model output tensor -> ref (once every firing is handed out)
    start_ref: Any  # the first firing's stamp
    refs: dict[str, Any] = field(default_factory=dict)  # tensor -> ref, as firings are handed out
    member: dict[str, int] = field(default_factory=dict)  # actor -> member taking the frame
    arrived: float | None = None  # wall-clock arrival, for frames on a clock


class RayPipeline:
    """The plan's workers started as Ray actors on their nodes (needs a Ray connection: see
    `ray_session`); `run` streams frames through them, `close` stops them."""

    def __init__(self, plan: Plan, graph: CnnGraph, runtime_env: dict | None = None,
                 progress: Callable[[str], None] | None = None, start_timeout: float = 300.0,
                 trace: bool = False):

        self.ray = ray = import_ray()
        self.plan, self.graph = plan, graph
        self.firings = firings(plan.app)
        self.patterns = {a: plan.mapping.pattern(a) for a in plan.app.phases}
        self.static = plan.mapping.dispatch_mode == "static"
        # per replica member: the last firing of each frame it was given and has not finished
        self.outstanding: dict[str, deque] = {}
        self.frames_taken: dict[str, int] = {}
        self.workers: dict[str, _Worker] = {}
        self._check_resources(ray)
        plan_dict = plan.to_dict()
        local_node = ray.get_runtime_context().get_node_id()
        cls = _remote_worker_class(ray)
        for actor, phases in plan.app.phases.items():
            subnets = {p.index: extract_subnet(graph, p.layers, name=f"{actor}#{p.index}")
                       .serialized() for p in phases}
            subnets_ref = ray.put(subnets)  # shipped once per actor, whatever its replicas
            for el in group_members(actor):
                node = split_element(el)[0] or "local"
                res = element_placement(plan, el)
                opts: dict[str, Any] = dict(num_cpus=0, max_restarts=0, max_task_retries=0,
                                            name=f"hetflow-{el}-{id(self):x}")
                if res:
                    opts["resources"] = res
                else:
                    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                    opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(local_node, False)
                if runtime_env:
                    opts["runtime_env"] = runtime_env
                if progress:
                    progress(f"starting {el} on node {node}")
                handle = cls.options(**opts).remote(plan_dict, actor, el, node, subnets_ref, trace)
                self.workers[el] = _Worker(el, actor, node, handle, {})
        self.by_actor_id = {w.handle._actor_id.hex(): w for w in self.workers.values()}
        self._busy_before: dict[str, float] = {}
        refs = {el: w.handle.ready.remote() for el, w in self.workers.items()}
        deadline = time.monotonic() + start_timeout
        for el, ref in refs.items():
            try:
                self.workers[el].info = ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
            except ray.exceptions.GetTimeoutError:
                self.close()
                raise RuntimeFault(f"element {el} (node {self.workers[el].node}): its Ray worker "
                                   f"did not start within {start_timeout:.0f} s (is the node up, "
                                   "with the resources it needs?)") from None
            except ray.exceptions.RayError as e:
                self.close()
                raise RuntimeFault(f"element {el} (node {self.workers[el].node}): its Ray worker "
                                   f"failed to start: {self._cause(e)}") from None

    def _check_resources(self, ray) -> None:
        have = ray.cluster_resources()
        for a in self.plan.app.phases:
            for el in group_members(a):
                for r in element_placement(self.plan, el):
                    if have.get(r, 0) <= 0:
                        hint = (f"start that node with --resources '{{\"{r}\": 1}}'"
                                if r.startswith("hetflow_node_")
                                else "is that node in the cluster?")
                        raise InputError(f"element {el}: no node of the Ray cluster offers "
                                         f"resource {r!r} to place it ({hint})")

    # ---- streaming ----
    def run(self, inputs: Callable[[int], dict[str, np.ndarray]], frames: int, warmup: int = 0,
            keep_outputs: Callable[[int], bool] = lambda f: False, stall_timeout: float = 30.0,
            on_frame: Callable[[int], None] | None = None, max_inflight: int | None = None,
            arrivals: np.ndarray | None = None
            ) -> tuple[RunReport, dict[int, dict[str, np.ndarray]]]:
        """Stream the frames (`arrivals`: seconds after the start at which each arrives, as
        `engine.run_prepared` takes them: none is handed out earlier and its latency counts
        from its arrival)."""
        # a global bound, unlike the local engine's per-channel windows: a fast stage may run
        # ahead of a slow one by up to this many frames
        # an interleaved element starts frames ahead of the ones it finishes
        window = (max_inflight or frames_in_flight(self.plan)) + frames_ahead(self.plan.mapping)
        self.frames_taken = {}
        pending: list[_Frame] = []  # frames handed out, not yet collected, oldest first
        opened: dict[int, _Frame] = {}
        done_at: list[float] = []
        latencies: list[float] = []
        kept: dict[int, dict[str, np.ndarray]] = {}
        complete = True
        t_start = last_entry = time.perf_counter()
        wall_start = time.time()

        def collect_oldest() -> None:
            self._collect(self._close(pending.pop(0), opened), stall_timeout, done_at,
                          latencies, kept, keep_outputs, on_frame)

        try:
            for f, i in self._order(frames):
                fr = opened.get(f)
                if fr is None:
                    while len(pending) >= window:
                        collect_oldest()
                    if arrivals is not None:
                        # until frame f arrives, collect the frames that are done meanwhile
                        while (left := t_start + arrivals[f] - time.perf_counter()) > 0:
                            if pending and self._done(pending[0], min(left, POLL)):
                                collect_oldest()
                            elif not pending:
                                time.sleep(left)
                    fr = opened[f] = self._open(f, inputs(f))
                    last_entry = time.perf_counter()
                    if arrivals is not None:
                        fr.arrived = wall_start + float(arrivals[f])
                        last_entry = t_start + float(arrivals[f])
                    pending.append(fr)
                self._fire(fr, self.firings[i])
            while pending:
                collect_oldest()
        except KeyboardInterrupt:
            complete = False
        # workers count busy seconds since they started: take off what earlier runs counted
        now = {el: s["busy"] for el, s in self._stats().items()}
        busy = {el: b - self._busy_before.get(el, 0.0) for el, b in now.items()}
        self._busy_before.update(now)
        return self._report(done_at, latencies, warmup, busy, t_start, complete,
                            last_entry), kept

    def _order(self, frames: int):
        """(frame, firing) in the order they are handed out: each actor's fire actions in the
        order of its compiled program (`runtime.program`: frame by frame, or the plan's
        interleaved one) over all frames, each after what it reads."""
        programs = {p.actor: p for p in compile_programs(self.plan)}  # its members' alike
        sequences = {a: ((f, act.phase) for act, f, _ in worker_actions(p, range(frames))
                         if act.kind == FIRE) for a, p in programs.items()}
        return submission_order(self.firings, sequences)

    def _open(self, f: int, x: dict[str, np.ndarray]) -> _Frame:
        refs: dict[str, Any] = {}
        for t in self.plan.app.model_inputs:
            if t not in x:
                raise InputError(f"frame {f}: the input source gave no tensor {t!r}")
            refs[t] = self.ray.put(x[t])  # one copy in the object store, shared by every reader
        return _Frame(f, [], {}, None, refs, {a: self._member(a, f) for a in self.plan.app.phases})

    def _fire(self, fr: _Frame, fi: Firing) -> None:
        m = fr.member[fi.actor]
        el = group_members(fi.actor)[m]
        args = [fr.refs[t] for t in fi.source_inputs + fi.recv_tensors]
        out = self.workers[el].handle.fire.options(num_returns=1 + len(fi.returns)).remote(
            fr.frame, fi.phase, *args)
        if fi.returns:
            fr.refs.update(zip(fi.returns, out[1:]))
            stamp = out[0]
        else:
            stamp = out
        fr.tasks.append((fi, m, stamp))
        if fr.start_ref is None:
            fr.start_ref = stamp
        if fi.last:
            self.frames_taken[el] = self.frames_taken.get(el, 0) + 1
            if el in self.outstanding:
                self.outstanding[el].append(stamp)

    def _close(self, fr: _Frame, opened: dict[int, _Frame]) -> _Frame:
        """A frame about to be collected: every firing of it handed out (the window is wider
        than any element runs ahead, so the order reaches them first)."""
        if len(fr.tasks) != len(self.firings):
            raise RuntimeFault(f"frame {fr.frame}: {len(fr.tasks)} of its {len(self.firings)} "
                               "firings handed out when it was due to be collected")
        del opened[fr.frame]
        fr.outputs = {t: fr.refs[t] for t in self.graph.outputs}
        return fr

    def _member(self, actor: str, f: int) -> int:
        """The member of `actor` that takes frame f: by the dispatch pattern (static mode), or
        the member with the fewest frames given and not finished (dynamic mode, the local
        engine's default: there the next frame goes to whichever member is free; here the
        driver decides when it submits, so it gives the frame to the least-loaded member)."""
        members = group_members(actor)
        if len(members) == 1:
            return 0
        if self.static:
            return member_of(self.patterns[actor], f)
        loads = []
        for el in members:
            q = self.outstanding.setdefault(el, deque())
            if q:
                ready, _ = self.ray.wait(list(q), num_returns=len(q), timeout=0)
                done = set(ready)
                while q and q[0] in done:  # a member finishes its frames in order
                    q.popleft()
            loads.append(len(q))
        return min(range(len(members)), key=lambda j: (loads[j], j))

    def _done(self, fr: _Frame, timeout: float) -> bool:
        """Whether frame `fr` is ready to collect, waiting up to `timeout` s: every firing
        handed out and its outputs computed (False where a firing is still to hand out)."""
        if len(fr.tasks) != len(self.firings):
            time.sleep(timeout)
            return False
        refs = [fr.refs[t] for t in self.graph.outputs] + [fr.start_ref]
        ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=timeout)
        return len(ready) == len(refs)

    def _collect(self, fr: _Frame, stall_timeout: float, done_at, latencies, kept, keep,
                 on_frame) -> None:
        ray = self.ray
        wanted = list(fr.outputs.values()) + [fr.start_ref]
        last = time.monotonic()
        while True:
            # a failed firing fails every firing that reads its results, so errors reach the
            # outputs; an actor's later phases repeat its first failure (see ElementWorker)
            ready, _ = ray.wait(wanted, num_returns=len(wanted), timeout=POLL)
            if len(ready) == len(wanted):
                break
            if time.monotonic() - last > stall_timeout:
                failed = self._first_failure(fr)  # one that has not reached the outputs yet
                if failed is not None:
                    raise failed
                raise RuntimeFault(f"stall: no frame completed for {stall_timeout:.0f} s at frame "
                                   f"{fr.frame}; {self._waiting(fr)}")
        try:
            values = ray.get(list(fr.outputs.values()) + [fr.start_ref], timeout=stall_timeout)
        except ray.exceptions.RayError as e:
            raise self._fault(e, fr) from None
        now_wall, now = time.time(), time.perf_counter()
        done_at.append(now)
        latencies.append(max(0.0, now_wall - (values[-1][0] if fr.arrived is None
                                              else fr.arrived)))
        if keep(fr.frame):
            kept[fr.frame] = {t: np.asarray(v) for t, v in zip(fr.outputs, values[:-1])}
        if on_frame:
            on_frame(fr.frame)

    def _first_failure(self, fr: _Frame) -> RuntimeFault | None:
        ray = self.ray
        stamps = [s for _, _, s in fr.tasks]
        ready, _ = ray.wait(stamps, num_returns=len(stamps), timeout=0)
        for ref in ready:
            try:
                ray.get(ref, timeout=PING_TIMEOUT)
            except ray.exceptions.RayError as e:
                return self._fault(e, fr)
        return None

    # ---- naming what went wrong ----
    def _cause(self, e: BaseException) -> str:
        e = _root(e)
        if isinstance(e, StageFault):
            return str(e)
        lines = [l.strip() for l in str(e).splitlines() if l.strip()]
        for l in lines:  # a worker's own message, passed on inside a Ray error's text
            if "StageFault: " in l:
                return l.split("StageFault: ", 1)[1]
        return lines[-1] if lines else type(e).__name__

    def _fault(self, e: BaseException, fr: _Frame) -> RuntimeFault:
        cause = _root(e)
        if isinstance(cause, StageFault):
            return RuntimeFault(str(cause))
        lost = self._lost_workers(cause)
        if lost:
            w, why = lost[0]
            more = f" (also lost: {', '.join(x.element for x, _ in lost[1:])})" if lost[1:] else ""
            return RuntimeFault(f"element {w.element} on node {w.node} (Ray node "
                                f"{w.info.get('node_id', '?')[:12]}, "
                                f"host {w.info.get('host', '?')})"
                                f" was lost: its Ray actor is gone ({why}); stage {w.actor}, run "
                                f"stopped at frame {fr.frame}{more}")
        return RuntimeFault(f"frame {fr.frame}: Ray failed: {type(cause).__name__}: "
                            f"{self._cause(cause)}")

    def _lost_workers(self, cause: BaseException) -> list[tuple[_Worker, str]]:
        """Workers whose actor is dead: the one the error names, else those a ping finds."""
        ray = self.ray
        named = self.by_actor_id.get(getattr(cause, "actor_id", None) or "")
        out = [(named, self._cause(cause))] if named else []
        pings = {el: w.handle.ready.remote() for el, w in self.workers.items()}
        ready, _ = ray.wait(list(pings.values()), num_returns=len(pings), timeout=PING_TIMEOUT)
        done = set(ready)
        for el, ref in pings.items():
            if ref not in done or (named and el == named.element):
                continue
            try:
                ray.get(ref, timeout=PING_TIMEOUT)
            except ray.exceptions.RayActorError as e:
                out.append((self.workers[el], self._cause(e)))
            except ray.exceptions.RayError:
                pass
        return out

    def _waiting(self, fr: _Frame) -> str:
        """The unfinished firings of frame `fr` whose inputs are all there: what runs (or hangs)."""
        ray = self.ray
        stamps = [s for _, _, s in fr.tasks]
        ready, _ = ray.wait(stamps, num_returns=len(stamps), timeout=0)
        ready = set(ready)
        done_phases = {(fi.actor, fi.phase) for fi, _, s in fr.tasks if s in ready}
        stuck = []
        for fi, m, s in fr.tasks:
            if s in ready:
                continue
            w = self.workers[group_members(fi.actor)[m]]
            stuck.append(f"{w.element} (node {w.node}) has not finished stage {fi.actor} phase "
                         f"{fi.phase}")
            if fi.phase == 0 or (fi.actor, fi.phase - 1) in done_phases:
                break  # the first unfinished firing in submission order holds up the rest
        return "; ".join(stuck) or "every firing of the frame finished"

    # ---- bookkeeping ----
    def _stats(self) -> dict[str, dict]:
        """Each worker's busy seconds and trace events ({} for a worker that cannot answer)."""
        ray = self.ray
        try:
            stats = ray.get([w.handle.stats.remote() for w in self.workers.values()],
                            timeout=PING_TIMEOUT)
        except ray.exceptions.RayError:
            return {}
        return dict(zip(self.workers, stats))

    def events(self) -> list[tuple]:
        return [ev for s in self._stats().values() for ev in s["events"]]

    def _report(self, done_at, latencies, warmup, busy, t_start, complete,
                last_entry) -> RunReport:
        nodes = {el: {"node": w.node, "frames": self.frames_taken.get(el, 0), **w.info}
                 for el, w in self.workers.items()}
        # frames are collected in order as they complete: their collection times stand for
        # their completions, counted until the last frame entered (steady_throughput)
        return stream_report(done_at, latencies, warmup, busy, t_start, complete,
                             self.plan.predicted, frames_ahead(self.plan.mapping), done_at,
                             last_entry if complete else None, engine="ray",
                             ray_version=self.ray.__version__, workers=nodes)

    def close(self) -> None:
        ray = self.ray
        for w in self.workers.values():
            with contextlib.suppress(Exception):
                ray.kill(w.handle, no_restart=True)


def run_on_ray(plan: Plan, graph: CnnGraph, source: Callable[[int], dict], frames: int,
               warmup: int, keep: Callable[[int], bool], stall_timeout: float,
               progress: Callable[[str], None] | None, on_frame: Callable[[int], None] | None,
               trace: bool, address: str | None, runtime_env: dict | None,
               max_inflight: int | None, arrivals: np.ndarray | None = None
               ) -> tuple[RunReport, dict, list[tuple]]:
    """`run_plan(..., engine="ray")`: the report, the kept outputs and the trace events. Ray:
    the connection this process has, else `address`, else a new local instance."""
    laned = {e: k for e, k in plan.mapping.lanes.items() if k > 1}
    if laned:  # its workers hold one runner per phase: a plan's lanes must not silently vanish
        e, k = next(iter(laned.items()))
        raise InputError(f"the Ray engine runs one lane per GPU, and the plan gives element "
                         f"{e!r} {k} lanes; run it locally, or map again for Ray")
    batched = {e: b for e, b in plan.mapping.batch.items() if b > 1}
    if batched:  # its driver submits a task a frame: a batch would silently run frame by frame
        e, b = next(iter(batched.items()))
        raise InputError(f"the Ray engine fires frame by frame, and the plan gives element "
                         f"{e!r} batch {b}; run it locally, or map again for Ray")
    with ray_session(address):
        pipe = RayPipeline(plan, graph, runtime_env, progress, trace=trace)
        try:
            report, kept = pipe.run(source, frames, warmup, keep, stall_timeout, on_frame,
                                    max_inflight, arrivals)
            return report, kept, pipe.events() if trace else []
        finally:
            pipe.close()
