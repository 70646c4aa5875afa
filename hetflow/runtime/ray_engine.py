"""Run a plan's CSDF application on Ray: one Ray actor per processing element, on its node,
each running the one firing loop over its worker program, as a local worker thread does.

Each actor (`runtime.ray_worker.ElementWorker`) builds the runners of its actor's phases on its
element and runs `loop.drive` over its compiled program (`plan.program`: receive, fire, send,
deliver; frame by frame or interleaved) on the frames its replica group's dispatch gives it. Its
channels are `runtime.ray_channel.RayChannel` ends: a producer sends a frame's tensor to the
consumer member that takes the frame (through Ray's object store, node to node) within the
channel's window, which the consumer's credits move on, as the local engine's FIFOs bound it.
The loop does not know which channel it has.

The driver only starts the actors, hands out frames (each frame's model inputs to the workers
that read them, at most `max_inflight` frames beyond the last one released, none before its
arrival; the members of dynamically dispatched replica groups by their load), collects the
delivered outputs in input order (`InOrder`), and watches: each actor's `poll` returns what it
delivered and started, its progress and its first fault. A replica group under static dispatch
takes frames by its pattern, with no word from the driver.

Why not Ray compiled graphs: a compiled graph runs every node once per `execute`, but a replica
group's member takes only some frames (by a pattern, or dynamically), and its zero-copy channel
buffers may not be held across executions while a worker keeps tensors for later phases. Where
it fits (no replica groups) it measured slower than plain calls on a 2-core machine
(docs/ray.md has the figures).

Faults, as `harness.supervise` handles them for every engine: a phase that raises stops the run
with RuntimeFault naming element, node, stage, phase and layers; a lost actor or node stops it
naming the element and node (found by pinging every worker); no frame released for
`stall_timeout` seconds stops it naming the firings that do not finish and what each other
worker waits on. Ctrl-C returns what was measured so far.
"""
from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from hetflow import interrupt
from hetflow.errors import InputError, RuntimeFault
from hetflow.model.graph import CnnGraph
from hetflow.model.subnet import extract_subnet
from hetflow.plan.mapping import group_members
from hetflow.plan.orders import frames_ahead
from hetflow.plan.plan import Plan
from hetflow.plan.schedule import InOrder, firings, frames_in_flight, member_of
from hetflow.platform.cluster import PLACEMENT_SHARE, node_resource, split_element
from hetflow.runtime.engine import first_frame_wait
from hetflow.runtime.harness import JOIN, POLL, Control, supervise
from hetflow.runtime.ray_worker import THREADS, ElementWorker, StageFault
from hetflow.runtime.report import RunReport, stream_report

RAY_MISSING = "--engine ray needs Ray: pip install 'hetflow[ray]'"
PING_TIMEOUT = 5.0
HOLD = 1.0  # s a worker's poll waits for something to say


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


# ---- the driver ---------------------------------------------------------------------------------
_REMOTE_CLS = None


def _remote_worker_class(ray):
    global _REMOTE_CLS
    if _REMOTE_CLS is None:
        _REMOTE_CLS = ray.remote(ElementWorker)
    return _REMOTE_CLS


def _root(e: BaseException) -> BaseException:
    """The error at the end of a Ray error's chain of causes (a worker's own exception)."""
    while getattr(e, "cause", None) is not None and e.cause is not e:
        e = e.cause
    return e


@dataclass
class _Worker:
    element: str
    actor: str
    node: str  # hetflow node name ('local' for plain element names)
    handle: Any
    info: dict[str, Any]


class RayPipeline:
    """The plan's workers started as Ray actors on their nodes (needs a Ray connection: see
    `ray_session`); `run` streams frames through them, `close` stops them."""

    def __init__(self, plan: Plan, graph: CnnGraph, runtime_env: dict | None = None,
                 progress: Callable[[str], None] | None = None, start_timeout: float = 300.0,
                 trace: bool = False):
        self.ray = ray = import_ray()
        self.plan, self.graph, self.trace = plan, graph, trace
        self.workers: dict[str, _Worker] = {}
        self.last_events: list[tuple] = []  # the last run's trace events
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
                                            max_concurrency=THREADS,
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
        """Stream the frames through the workers' loops and collect them in order. The driver
        hands each frame's model inputs to the workers that read them, at most `max_inflight`
        frames (default `frames_in_flight`) beyond the last one released, none before its
        arrival (`arrivals`: seconds after the start, as `engine.run_prepared` takes them; its
        latency then counts from it); it dispatches the replica groups that take frames
        dynamically."""
        ray, plan = self.ray, self.plan
        dynamic = [a for a in plan.app.phases
                   if plan.mapping.dispatch_mode != "static" and len(group_members(a)) > 1]
        peers = {el: w.handle for el, w in self.workers.items()}
        self._ask("connect", PING_TIMEOUT + 30.0, peers, frames, dynamic, keep_outputs)
        feeding = Feeding(plan, frames, dynamic, inputs)
        window = (max_inflight or frames_in_flight(plan)) + frames_ahead(plan.mapping)
        control, order = Control(), InOrder(frames)
        outputs_of = len(set(plan.app.model_outputs.values()))
        parts: dict[int, int] = {}
        kept: dict[int, dict[str, np.ndarray]] = {}
        entered = np.full(frames, np.nan)  # perf_counter, as the collection times
        taken: dict[str, int] = {}
        self._ask("start", PING_TIMEOUT)
        t_start = time.perf_counter()
        to_perf = t_start - time.time()  # the workers' wall-clock times -> this clock
        arrive = None if arrivals is None else t_start + np.asarray(arrivals, dtype=float)
        handles = {el: w.handle for el, w in self.workers.items()}
        polls = {h.poll.remote(HOLD): el for el, h in handles.items()}

        def hand_out() -> None:
            """Open the frames the window lets in (and that arrived): their inputs to the
            workers that read them, each dynamic group's frames to its members."""
            limit = min(frames, order.next + window)
            now = time.perf_counter()
            feeds: dict[str, list] = {}
            gives: dict[str, list[int]] = {}
            while feeding.opened < limit and (arrive is None or arrive[feeding.opened] <= now):
                f = feeding.opened
                if arrive is not None:
                    entered[f] = arrive[f]
                try:
                    readers, takers = feeding.open(f, taken)
                except InputError:
                    raise
                except Exception as e:  # as the loop names a frame source's failure
                    control.fail(f"frame source, frame {f}: {type(e).__name__}: {e}")
                    return
                for el, item in readers.items():
                    feeds.setdefault(el, []).append(item)
                for el in takers:
                    gives.setdefault(el, []).append(f)
            last = feeding.opened == frames and not feeding.closed
            for el, batch in feeds.items():
                handles[el].feed.remote(batch)
            for el in feeding.members() if last else gives:
                handles[el].give.remote(gives.get(el, []), last)
            feeding.closed = feeding.closed or last

        def take_in(el: str, st: dict[str, Any]) -> None:
            if st["fault"]:
                control.fail(st["fault"])
            taken[el] = st["taken"]
            for f, wall, outs in st["delivered"]:
                if outs is not None:
                    kept.setdefault(f, {}).update(outs)
                got = parts.pop(f, 0) + 1
                if got == outputs_of:
                    order.complete(f, wall + to_perf)
                else:
                    parts[f] = got
            if arrive is None:
                for f, wall in st["entered"].items():
                    entered[f] = np.fmin(entered[f], wall + to_perf)

        def step() -> int | None:
            hand_out()
            wait = POLL
            if arrive is not None and feeding.opened < min(frames, order.next + window):
                # the next frame to open waits only for its arrival
                wait = min(wait, max(0.0, arrive[feeding.opened] - time.perf_counter()))
            refs = list(polls)
            ready, rest = ray.wait(refs, num_returns=1, timeout=wait)
            if ready and rest:
                ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            for ref in ready:
                el = polls.pop(ref)
                try:
                    st = ray.get(ref)
                except ray.exceptions.RayError as e:
                    raise self._fault(e, order.next) from None
                take_in(el, st)
                polls[handles[el].poll.remote(HOLD)] = el
            start, stop = order.release(frames)
            for f in range(start, stop):
                if on_frame:
                    try:
                        on_frame(f)
                    except BaseException:  # (Ctrl-C) the frames after f were not handed on
                        order.next = f + 1
                        raise
            return None if order.next >= frames else order.next

        patience = stall_timeout + first_frame_wait(plan)
        if arrivals is not None:  # a frame held back for later ones waits for them
            patience += float(np.max(np.diff(arrivals), initial=0.0)) * (
                frames_ahead(plan.mapping) + 1)
        complete = supervise(step, control, patience, self._stalled)
        ends = self._ask("stop", JOIN + PING_TIMEOUT)
        # the polls in flight answered at the stop: the frames they say started count
        for ref, el in polls.items():
            with contextlib.suppress(ray.exceptions.RayError):
                take_in(el, ray.get(ref, timeout=PING_TIMEOUT))
        for el, st in ends.items():
            taken[el] = st["taken"]
            if arrive is None:
                for f, wall in st["entered"].items():
                    entered[f] = np.fmin(entered[f], wall + to_perf)
        return self._report(ends, taken, entered, order, warmup, t_start, complete, kept)

    def _report(self, ends: dict[str, dict], taken: dict[str, int], entered: np.ndarray,
                order: InOrder, warmup: int, t_start: float, complete: bool,
                kept: dict[int, dict[str, np.ndarray]]
                ) -> tuple[RunReport, dict[int, dict[str, np.ndarray]]]:
        """The run's report from what the workers said at the stop (`ends`), and the outputs
        kept of the frames released; the workers' trace events in `last_events`."""
        self.last_events = [ev for st in ends.values() for ev in st["events"]]
        n = order.next
        done_at = order.released_at[:n]
        first = np.where(np.isnan(entered[:n]), done_at, entered[:n])
        busy = {el: st["busy"] for el, st in ends.items()}
        nodes = {el: {"node": w.node, "frames": taken.get(el, 0), **w.info}
                 for el, w in self.workers.items()}
        report = stream_report(done_at.tolist(), (done_at - first).tolist(), warmup, busy,
                               t_start, complete, self.plan.predicted,
                               frames_ahead(self.plan.mapping), order.completed_at.tolist(),
                               float(first.max()) if complete and n else None, engine="ray",
                               ray_version=self.ray.__version__, workers=nodes)
        return report, {f: kept[f] for f in sorted(kept) if f < n}

    def _ask(self, method: str, timeout: float, *args) -> dict[str, Any]:
        """Call `method` on every worker and wait for the answers."""
        ray = self.ray
        refs = {el: getattr(w.handle, method).remote(*args) for el, w in self.workers.items()}
        try:
            return dict(zip(refs, ray.get(list(refs.values()), timeout=timeout)))
        except ray.exceptions.RayError as e:
            raise self._fault(e, 0) from None

    # ---- naming what went wrong ----
    def _stalled(self, frame: int) -> str:
        """A stall's message: the oldest frame not released, the firings that do not finish,
        then what each other worker waits on."""
        ray = self.ray
        refs = {el: w.handle.waits.remote() for el, w in self.workers.items()}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=PING_TIMEOUT)
        said = []
        for el, ref in refs.items():
            try:
                said.append(ray.get(ref, timeout=0) if ref in ready else
                            f"{el} (node {self.workers[el].node}) does not answer")
            except ray.exceptions.RayError as e:
                said.append(f"{el} (node {self.workers[el].node}): {self._cause(e)}")
        said.sort(key=lambda s: "has not finished" not in s)  # the firings that hang first
        return f"at frame {frame}; " + "; ".join(said)

    def _cause(self, e: BaseException) -> str:
        e = _root(e)
        if isinstance(e, StageFault):
            return str(e)
        lines = [l.strip() for l in str(e).splitlines() if l.strip()]
        for l in lines:  # a worker's own message, passed on inside a Ray error's text
            if "StageFault: " in l:
                return l.split("StageFault: ", 1)[1]
        return lines[-1] if lines else type(e).__name__

    def _fault(self, e: BaseException, frame: int) -> RuntimeFault:
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
                                f"stopped at frame {frame}{more}")
        return RuntimeFault(f"frame {frame}: Ray failed: {type(cause).__name__}: "
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

    def events(self) -> list[tuple]:
        """The last run's trace events (wall-clock times; empty unless traced)."""
        return self.last_events

    def close(self) -> None:
        ray = self.ray
        for w in self.workers.values():
            with contextlib.suppress(Exception):
                ray.kill(w.handle, no_restart=True)


class Feeding:
    """The driver's part of the frames: which member of each replica group takes frame f (a
    static pattern, else the least loaded member of a dynamic group: frames given less those
    it took, as its polls say), and the model inputs each worker that reads them gets."""

    def __init__(self, plan: Plan, frames: int, dynamic: list[str],
                 source: Callable[[int], dict[str, np.ndarray]]):
        self.plan, self.frames, self.dynamic, self.source = plan, frames, dynamic, source
        self.loads: dict[str, tuple[str, ...]] = {}  # actor -> model inputs it reads
        for fi in firings(plan.app):
            if fi.source_inputs:
                self.loads[fi.actor] = tuple(dict.fromkeys(self.loads.get(fi.actor, ())
                                                           + fi.source_inputs))
        self.patterns = {a: plan.mapping.pattern(a) for a in plan.app.phases}
        self.given: dict[str, int] = {}  # element -> frames given (dynamic groups)
        self.opened = 0  # frames below it are handed out
        self.closed = False  # every dynamic member told that no frame follows

    def members(self) -> list[str]:
        return [el for a in self.dynamic for el in group_members(a)]

    def open(self, f: int, taken: dict[str, int]) -> tuple[dict[str, tuple], list[str]]:
        """Frame f handed out: {worker that reads model inputs: (f, its inputs, the route)},
        and the members of the dynamic groups that take it."""
        route = []
        for a in self.dynamic:
            els = group_members(a)
            j = min(range(len(els)), key=lambda j: (self.given.get(els[j], 0)
                                                   - taken.get(els[j], 0), j))
            self.given[els[j]] = self.given.get(els[j], 0) + 1
            route.append(j)
        x = self.source(f)
        readers = {}
        for a, names in self.loads.items():
            missing = [t for t in names if t not in x]
            if missing:
                raise InputError(f"frame {f}: the input source gave no tensor {missing[0]!r}")
            members = group_members(a)
            j = (route[self.dynamic.index(a)] if a in self.dynamic else
                 0 if len(members) == 1 else member_of(self.patterns[a], f))
            readers[members[j]] = (f, {t: x[t] for t in names},
                                   tuple(route) if self.dynamic else None)
        self.opened = f + 1
        return readers, [group_members(a)[j] for a, j in zip(self.dynamic, route)]


def run_on_ray(plan: Plan, graph: CnnGraph, source: Callable[[int], dict], frames: int,
               warmup: int, keep: Callable[[int], bool], stall_timeout: float,
               progress: Callable[[str], None] | None, on_frame: Callable[[int], None] | None,
               trace: bool, address: str | None, runtime_env: dict | None,
               max_inflight: int | None, arrivals: np.ndarray | None = None
               ) -> tuple[RunReport, dict, list[tuple]]:
    """`run_plan(..., engine="ray")`: the report, the kept outputs and the trace events. Ray:
    the connection this process has, else `address`, else a new local instance."""
    # a worker's loop waits for its frames' inputs from the driver in its one thread, so the
    # lanes of a GPU would not overlap, nor would a partial batch fire when its wait is over:
    # such plans are refused rather than run differently from the local engine
    laned = {e: k for e, k in plan.mapping.lanes.items() if k > 1}
    if laned:
        e, k = next(iter(laned.items()))
        raise InputError(f"the Ray engine runs one lane per GPU, and the plan gives element "
                         f"{e!r} {k} lanes; run it locally, or map again for Ray")
    batched = {e: b for e, b in plan.mapping.batch.items() if b > 1}
    if batched:
        e, b = next(iter(batched.items()))
        raise InputError(f"the Ray engine fires frame by frame, and the plan gives element "
                         f"{e!r} batch {b}; run it locally, or map again for Ray")
    with ray_session(address):
        pipe = RayPipeline(plan, graph, runtime_env, progress, trace=trace)
        try:
            report, kept = pipe.run(source, frames, warmup, keep, stall_timeout, on_frame,
                                    max_inflight, arrivals)
            return report, kept, pipe.events()
        finally:
            pipe.close()
