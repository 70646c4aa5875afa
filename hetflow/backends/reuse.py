"""Runners built once and reused inside a scope.

Building a runner is the slow part of a short measurement: an ONNX Runtime session of a large
CNN takes seconds to create, and the GPU backend converts the model and captures a CUDA graph
per lane. ONNX Runtime builds a session with the GIL released, so `runners_for_many` builds the
CPU runners of many elements on a pool of threads.
A bench builds the same runners again and again: the parallel baseline's whole-model copy on
each core, then each pilot, the plan's re-timing and its run. Inside `reusing_runners()`,
`runners_for` hands back the runners built earlier for the same model, layers, element and
batch (GPU lanes from one pool per element and batch: k lanes are the pool's first k, and
lanes added to a pool share its weights; elements of one `share_key`, single CPU cores, share one runner's state) and
`release` keeps them;
they are closed when the scope ends, or earlier, least recently used first, when the models
they hold exceed the scope's byte budget. Outside a scope `runners_for` builds fresh runners
and `release` closes them.

A runner is used by one run at a time: callers release what they took before the next run.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from hetflow.backends.registry import backend_for
from hetflow.errors import BackendError
from concurrent.futures import ThreadPoolExecutor
from hetflow.model.subnet import extract_subnet, subnet_key

if TYPE_CHECKING:
    from hetflow.model.graph import CnnGraph
    from hetflow.platform.spec import ProcessingElement

    from hetflow.backends.base import Runner


class _Scope:
    def __init__(self, max_bytes: int | None):
        self.max_bytes = max_bytes
        self.pools: OrderedDict[tuple, list] = OrderedDict()  # least recently used first
        self.bytes: dict[tuple, int] = {}
        self.in_use: dict[int, int] = {}  # id(runner) -> how many callers hold it
        self.owned: set[int] = set()
        self.lock = threading.Lock()
        self.built = self.reused = 0
        # per (model, layers, backend, share key): the runner others share (`prepare_like`)
        self.twins: dict[tuple, Any] = {}
        self.twin_locks: dict[tuple, threading.Lock] = {}

    def twin_lock(self, key: tuple) -> threading.Lock:
        with self.lock:
            return self.twin_locks.setdefault(key, threading.Lock())

    def take(self, key: tuple, build, count: int) -> list:
        with self.lock:
            pool = self.pools.setdefault(key, [])
            self.pools.move_to_end(key)
            missing = count - len(pool)
            self.reused += min(count, len(pool))
            head = pool[:1]
        if missing > 0:
            fresh, nbytes = build(head, missing)
            with self.lock:
                pool += fresh
                self.owned.update(id(r) for r in fresh)
                self.bytes[key] = self.bytes.get(key, 0) + nbytes
                self.built += len(fresh)
        with self.lock:
            got = pool[:count]
            for r in got:
                self.in_use[id(r)] = self.in_use.get(id(r), 0) + 1
            self._evict()
        return got

    def release(self, runners: Iterable) -> list:
        """The runners this scope does not own (the caller closes them)."""
        foreign = []
        with self.lock:
            for r in runners:
                if id(r) in self.owned:
                    n = self.in_use.get(id(r), 0) - 1
                    if n > 0:
                        self.in_use[id(r)] = n
                    else:
                        self.in_use.pop(id(r), None)
                else:
                    foreign.append(r)
            self._evict()
        return foreign

    def _evict(self) -> None:
        if self.max_bytes is None:
            return
        for key in list(self.pools):
            if sum(self.bytes.values()) <= self.max_bytes:
                return
            pool = self.pools[key]
            if any(id(r) in self.in_use for r in pool):
                continue
            del self.pools[key]
            self.bytes.pop(key, None)
            for r in pool:
                self.owned.discard(id(r))
                _close(r)

    def close(self) -> None:
        with self.lock:
            pools, self.pools = list(self.pools.values()), OrderedDict()
            self.bytes.clear()
            self.twins.clear()
            self.owned.clear()
            self.in_use.clear()
        for pool in pools:
            for r in pool:
                _close(r)


_scope: _Scope | None = None


def _close(runner) -> None:
    close = getattr(runner, "close", None)
    if close is not None:
        close()


def _default_budget() -> int | None:
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return None
    return int(0.25 * psutil.virtual_memory().total)


@contextmanager
def reusing_runners(max_bytes: int | None = -1) -> Iterator[_Scope]:
    """Reuse runners inside the block (nested blocks share the outer one). `max_bytes`: the
    serialized size of the models the kept runners hold, at most (-1: a quarter of this
    machine's memory; None: no bound)."""
    global _scope
    if _scope is not None:
        yield _scope
        return
    _scope = _Scope(_default_budget() if max_bytes == -1 else max_bytes)
    try:
        yield _scope
    finally:
        scope, _scope = _scope, None
        scope.close()


def runners_for(graph: "CnnGraph", layers: Iterable[str], element: "ProcessingElement",
                lanes: int = 1, name: str | None = None, batch: int = 1) -> list["Runner"]:
    """`lanes` runners of `layers` of `graph` on `element` (one, unless a GPU runs lanes),
    each running `batch` frames a firing; give them back with `release`."""

    layers = list(layers)
    backend = backend_for(element)
    key = subnet_key(layers)
    share = backend.share_key(element) if _scope is not None else None
    twin_key = (graph.model_hash, key, backend.name, share, batch)
    opts = {"batch": batch} if batch != 1 else {}  # backends without batches take none

    def build(existing: list, k: int) -> tuple[list, int]:
        made, nbytes = build_lanes(existing, k)
        if any(getattr(r, "batch", 1) != batch for r in made):
            release(made)
            raise BackendError(f"backend {backend.name!r} on {element.name}: its runners do not "
                               f"run batches (batch {batch} asked)")
        return made, nbytes

    def build_lanes(existing: list, k: int) -> tuple[list, int]:
        sub = extract_subnet(graph, layers, name=name)
        if k == 1 and not existing and share is not None:
            # the first of several threads builds; the others wait and share its state
            with _scope.twin_lock(twin_key):
                twin = _scope.twins.get(twin_key)
                made = backend.prepare_like(twin, element) if twin is not None else None
                if made is not None:
                    return [made], 0
                _scope.twins[twin_key] = made = backend.prepare(sub, element, **opts)
                return [made], weights
        if k == 1 and not existing:
            return [backend.prepare(sub, element, **opts)], weights
        # more lanes for a pool share its first runner's weights where the backend can
        made = list(backend.prepare_lanes(sub, element, k, like=existing[0] if existing
                                          else None, **opts))
        return made, 0 if existing and element.kind == "gpu" else weights

    # the weights a runner holds (ByteSize() walks the whole proto: 3.4 s on vgg19)
    weights = sum(graph.layer(l).param_bytes for l in layers)
    if _scope is None:
        return build([], lanes)[0]
    return _scope.take((graph.model_hash, key, element, batch), build, lanes)


def runners_for_many(graph: "CnnGraph", wanted: Sequence[tuple], threads: int = 8
                     ) -> list[list["Runner"]]:
    """`runners_for(graph, layers, element, lanes, name[, batch])` of each item of `wanted`
    (tuples of those arguments, batch 1 where left out), in order: CPU runners by a pool of
    threads, the others here (see `build_together`)."""

    wanted = [(list(w[0]), *w[1:]) for w in wanted]
    for layers, e, *_ in wanted:  # cut (and made ready for ONNX Runtime) once, before the
        sub = extract_subnet(graph, layers)  # threads share them
        if e.kind == "cpu":
            sub.weightless()
    return build_together([lambda w=w: runners_for(graph, *w) for w in wanted],
                          [w[1].kind == "cpu" for w in wanted], threads)


def build_together(builders: Sequence[Callable[[], Any]], threaded: Sequence[bool],
                   threads: int = 8) -> list:
    """What each builder returns, in order. The `threaded` ones run on up to `threads` threads
    at once: an ONNX Runtime session builds with the GIL released (two vgg19 sessions built side
    by side on the 2-core VM took 1.5x the time of one, where a bench builds fifteen, one a
    core, for its parallel baseline, and a profile one a layer for each element shape). The
    others (a GPU's conversion and graph captures) run here, one at a time. On a failure, what
    was built (runners, or lists of them) is given back and the first error raised."""

    out: list = [None] * len(builders)
    errors: list[BaseException] = []

    def build(i: int) -> None:
        try:
            out[i] = builders[i]()
        except BaseException as err:  # noqa: BLE001 - the first is raised below
            errors.append(err)

    pooled = [i for i, t in enumerate(threaded) if t]
    if pooled:
        with ThreadPoolExecutor(max_workers=max(1, min(threads, len(pooled)))) as pool:
            list(pool.map(build, pooled))
    for i, t in enumerate(threaded):
        if not t and not errors:
            build(i)
    if errors:
        release(r for x in out if x is not None for r in (x if isinstance(x, list) else [x]))
        raise errors[0]
    return out


def release(runners: Iterable) -> None:
    """Give back runners from `runners_for` (or any runners): kept if the current scope owns
    them, closed otherwise. Closes them all even if one fails, then raises the first error."""
    runners = list(runners)
    foreign = runners if _scope is None else _scope.release(runners)
    first: BaseException | None = None
    for r in foreign:
        try:
            _close(r)
        except Exception as e:  # noqa: BLE001 - close the rest, report the first
            first = first or e
    if first is not None:
        raise first
