"""GPU lanes in the profile: the whole model on one GPU element with k frames in flight.

For each lane count k, k lanes (runners over one copy of the weights, see
`Backend.prepare_lanes`) are kept busy for a while by one thread, k runs in flight, as the
runtime drives them (`backends.inflight`); the time of one firing and the element's frames per
second are recorded, once with the other elements
idle and once with single-thread whole-model copies busy on the other cores (the load a
data-parallel or pipelined plan puts beside the GPU). The contention curve t(k) is then data:
the cost model reads firing-time ratios from it. Device memory per lane is recorded, and the
most lanes the free device memory holds.

Batches (`measure_batches`): the same at each batch b of BATCHES x lane count k: a firing is
one run of b frames on one lane, so the element's rate at (b, k) is k * b / t(b, k). The
profile keeps it as `gpu_batches[element]["b,k"]` with the device memory the k lanes of b took
at build. A CPU element gets a batch table (`measure_cpu_batches`) only where ONNX Runtime ran
a frame faster in a batch than alone, by CPU_BATCH_MARGIN.
"""
from __future__ import annotations

import collections
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

from hetflow.backends import pin_current_thread, pinned
from hetflow.backends.inflight import InFlight
from hetflow.backends.batching import gather
from hetflow.backends.registry import backend_for
from hetflow.backends.staging import Stager, row_chunks
from hetflow.backends.reuse import release, reusing_runners, runners_for, runners_for_many
from hetflow.backends.together import frames_in_window, run_together
from hetflow.errors import BackendError, RuntimeFault
from hetflow.model.subnet import extract_subnet

from hetflow.profile.measure import random_feeds, stats

if TYPE_CHECKING:
    from hetflow.model.graph import CnnGraph
    from hetflow.platform.spec import ProcessingElement

LANE_COUNTS = (1, 2, 4, 8)  # always timed
# Timed in turn after those while the last count still raised the rate by MORE_GAIN: an H100
# ran batch-1 resnet18, mobilenet_v2, googlenet and densenet121 1.25-1.65x faster at 16 lanes
# than at 8 (tiny_yolo_v2 and squeezenet1_0 no faster), googlenet faster again at 24.
MORE_COUNTS = (16, 24)
MORE_GAIN = 1.10
BATCHES = (1, 2, 4, 8, 16, 32)  # frames a GPU firing, timed in turn while the budget lasts
BATCH_LANES = (1, 2, 4, 8)  # lane counts timed at each batch
CPU_BATCHES = (1, 2, 4, 8)
CPU_BATCH_MARGIN = 0.05  # a CPU batch is kept where a frame ran this much faster in it


def next_count(rates: dict[int, float], limit: int | None = None,
               more: Sequence[int] = MORE_COUNTS) -> int | None:
    """The lane count to time after those in `rates` ({k: frames/s}): the next of `more`
    when the largest count measured still ran MORE_GAIN faster than the one before it and the
    device memory holds it (`limit`: the most lanes it holds); else None."""
    ks = sorted(rates)
    if len(ks) < 2:
        return None
    nxt = next((c for c in more if c > ks[-1]), None)
    if nxt is None or (limit is not None and nxt > limit):
        return None
    return nxt if rates[ks[-1]] >= MORE_GAIN * rates[ks[-2]] else None


def _device_memory(element: "ProcessingElement") -> tuple[int, int] | None:
    """(bytes reserved by this process, bytes free) on a CUDA element; None elsewhere."""
    if element.kind != "gpu" or element.backend not in (None, "torch_cuda"):
        return None
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    idx = element.device_index or 0
    torch.cuda.synchronize(idx)
    return torch.cuda.memory_reserved(idx), torch.cuda.mem_get_info(idx)[0]


def _time_lanes(what: str, lanes: list, element: "ProcessingElement", feeds: dict,
                seconds: float, warmup: int, batch: int = 1) -> dict[str, Any]:
    """Firing-time stats, frames/s and the driving thread's CPU time per firing (launching
    and collecting, not waiting) of `lanes` kept busy for `seconds` by one thread on the
    element's driving core, as the runtime drives them (after `warmup` frames each). With
    `batch` > 1 each firing runs a full batch of `batch` frames (copies of `feeds`)."""
    spans: list[tuple[float, float]] = []  # (launched, collected) per firing
    cpu: list[float] = []  # the driving thread's CPU time per firing, its wait left out
    runs = InFlight(lanes)
    frames = [feeds] * batch
    launch = runs.submit if batch == 1 else (lambda _, tag: runs.submit_frames(frames, tag))

    def prepare(_: int) -> None:
        pin_current_thread(element.cores[:1])
        for r in lanes:
            for _ in range(warmup):
                r.run(feeds)

    def one_firing() -> None:
        runs.wait()
        c0 = time.thread_time()
        (t0, launch_cpu), _ = runs.collect()
        spans.append((t0, time.perf_counter()))
        cpu.append(launch_cpu[0] + time.thread_time() - c0)

    def step(_: int) -> bool:
        while runs.has_room():
            c0, launch_cpu = time.thread_time(), [0.0]
            launch(feeds, (time.perf_counter(), launch_cpu))
            launch_cpu[0] = time.thread_time() - c0
        one_firing()
        return True

    window = run_together(what, [element.name], prepare, step, lambda elapsed: elapsed >= seconds)
    while len(runs):  # runs under way at the window's end count by their share inside it
        one_firing()
    flat = [e - b for b, e in spans]
    done = batch * frames_in_window(spans, window.start, window.stop)
    return {"firing": stats(flat), "fps": done / (window.stop - window.start),
            "host": stats(cpu)}


@contextmanager
def running_beside(busy: Sequence, feeds: dict) -> Iterator[Callable[[], int]]:
    """Keep each of the `busy` runners running frames back to back in its own thread, pinned
    to its cores, for the whole block; the block starts once each has run one frame, and gets
    a function that counts the frames they have finished. One load held across every lane
    count, not started and drained per count: a busy copy of a large CNN takes a good part of a
    second a frame, which each start and end would pay again."""
    stop = threading.Event()
    ready = threading.Barrier(len(busy) + 1)
    done = [0] * len(busy)
    errors: list[str] = []

    def copy(i: int) -> None:
        r = busy[i]
        try:
            pin_current_thread(r.caller_cores)
            r.run(feeds)
        except BaseException as e:  # noqa: BLE001 - reported when the block ends
            errors.append(f"busy copy {i}: {type(e).__name__}: {e}")
        ready.wait()
        try:
            while not stop.is_set() and not errors:
                r.run(feeds)
                done[i] += 1
        except BaseException as e:  # noqa: BLE001 - reported when the block ends
            errors.append(f"busy copy {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=copy, args=(i,), daemon=True) for i in range(len(busy))]
    for t in threads:
        t.start()
    ready.wait()
    try:
        if errors:
            raise RuntimeFault(f"lanes beside busy copies: {errors[0]}")
        yield lambda: sum(done)
    finally:
        stop.set()
        for t in threads:
            t.join()
    if errors:
        raise RuntimeFault(f"lanes beside busy copies: {errors[0]}")


def measure_staging(element: "ProcessingElement", lanes: int, nbytes: int = 8 << 20,
                    pool: int = 16, seconds: float = 0.3, rows: int = 1,
                    row_bytes: int = 0) -> dict[str, Any]:
    """{"per_byte": CPU seconds per byte, "lanes", "nbytes"}: what `lanes` threads on the
    element's driving core pay to copy a firing's input, as a lane stages it into its pinned
    buffer: from a ring of `pool` arrays written by another core (larger than the caches
    together), into the thread's own buffer. The whole model's host time covers its own small
    input; a stage fed a large activation pays this per byte on top. (Copies from a ring of
    eight 224 x 224 frames, as the runs' random frame source holds them, cost 3-4x less a byte
    on the H200 machine, and predicted two batched GPU plans at 1.5-1.7x their runs; with this
    ring the plans of googlenet and alexnet the run before were predicted within 2%.)
    With `rows` > 1 and `row_bytes`, also {"staged": measure_stager's} for such batches."""
    src = [np.full(nbytes, i, dtype=np.uint8) for i in range(pool)]
    cpu: list[float] = []
    lock = threading.Lock()

    def lane(i: int) -> None:
        pin_current_thread(element.cores[:1])
        dst = np.ones(nbytes, dtype=np.uint8)
        n, spent, t_end = i, 0.0, time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            c0 = time.thread_time()
            np.copyto(dst, src[n % pool])
            spent += time.thread_time() - c0
            n += lanes
        with lock:
            cpu.append(spent / max(1, (n - i) // lanes))

    threads = [threading.Thread(target=lane, args=(i,), daemon=True) for i in range(lanes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = {"per_byte": float(np.median(cpu)) / nbytes, "lanes": lanes, "nbytes": nbytes}
    if row_bytes and rows > 1:
        out["staged"] = measure_stager(element, rows, row_bytes, seconds=seconds)
    return out


def measure_stager(element: "ProcessingElement", rows: int, row_bytes: int,
                   ring_bytes: int = 160 << 20, seconds: float = 0.3) -> dict[str, float]:
    """{"rows", "stagers", "per_byte": wall seconds per byte}: a batch of `rows` frames of
    `row_bytes` staged as a lane stages it (`backends.staging.Stager`: the driving thread and
    the element's other cores), from a ring larger than the caches. The cost model divides a
    thread's copy cost by the threads that share a batch (`Problem.staging_seconds`); threads
    copying at once share the memory's bandwidth, and hand-offs cost, so that split is bounded
    by what they were seen to do together: on the H200 machine four threads staged b32 batches
    of 224 x 224 frames at 1.3-1.5x what two did, not 2x."""
    n = max(rows, -(-ring_bytes // max(1, row_bytes)))
    ring = np.ones((n, max(1, row_bytes)), dtype=np.uint8)
    dst = np.zeros((rows, max(1, row_bytes)), dtype=np.uint8)
    stager = Stager(element.cores[1:]).attach()
    walls: list[float] = []
    start = [0]

    def stage_rows(a: int, b: int) -> None:
        for i in range(a, b):
            np.copyto(dst[i], ring[(start[0] + i) % n])

    try:
        with pinned(element.cores[:1]):
            t_end = time.perf_counter() + seconds
            while time.perf_counter() < t_end or len(walls) < 3:
                t0 = time.perf_counter()
                stager.stage(rows, stage_rows)
                walls.append(time.perf_counter() - t0)
                start[0] += rows
    finally:
        stager.release()
    return {"rows": rows, "stagers": len(row_chunks(rows, len(element.cores))),
            "per_byte": float(np.median(walls)) / (rows * row_bytes)}


def lanes_complete(table: dict[str, Any]) -> bool:
    """Whether a lane table timed every count that `next_count` asks for (one made when the
    counts stopped at 8 may not have)."""
    rates = {int(k): v["alone_fps"] for k, v in table.items() if k.isdigit()}
    return next_count(rates, table.get("memory", {}).get("max_lanes")) is None


def _two_passes(counts: Sequence[int], run, seconds: float,
                more: Callable[[dict[int, float]], int | None] | None = None
                ) -> dict[int, dict[str, Any]]:
    """{k: run(k, seconds / 2)} over two passes, the lane counts up then down, keeping per k the
    run with the higher frames/s: on a shared machine a second's run of one lane count
    was at times slowed by something else (mobilenet_v2's 8 lanes once measured 2.33x the
    one-lane firing where runs before measured 1.57-1.97x), and a slowdown, not a speed-up, is
    what another process causes. Going up then down also spreads any drift over the counts.
    `more(rates so far)`: a further count to time on the way up, or None (next_count)."""
    best: dict[int, dict[str, Any]] = {}
    up = list(counts)
    for k in up:
        best[k] = run(k, seconds / 2)
        if more is not None and k == up[-1]:
            nxt = more({c: best[c]["fps"] for c in up})
            if nxt is not None and nxt not in best:
                up.append(nxt)
    for k in reversed(up):
        r = run(k, seconds / 2)
        if r["fps"] > best[k]["fps"]:
            best[k] = r
    return {k: best[k] for k in up}


def measure_lanes(graph: "CnnGraph", element: "ProcessingElement",
                  busy_elements: Sequence["ProcessingElement"] = (),
                  counts: Sequence[int] = LANE_COUNTS, seconds: float = 1.0,
                  warmup: int = 3, more: Sequence[int] = MORE_COUNTS
                  ) -> dict[str, dict[str, Any]]:
    """{str(k): {"alone": firing stats, "alone_fps", "host": CPU time of the driving thread per
    firing, "busy": firing stats, "busy_fps"}} of the whole model on `element` at each lane
    count (`counts`, then those of `more` in turn while `next_count` says so), plus
    {"memory": {"per_lane_bytes", "free_bytes", "max_lanes"}} where the device reports its
    memory, {"staging": measure_staging's} and {"seconds": {part: seconds}}, where
    the table's own time went (building the lanes, timing them alone, building the busy copies,
    their first frames, timing beside them, their last frames)."""
    with reusing_runners() as scope:  # the bench's scope where there is one: it keeps the lanes
        return _measure_lanes(graph, element, busy_elements, counts, seconds, warmup, more,
                              scope)


def _measure_lanes(graph, element, busy_elements, counts, seconds, warmup, more, scope):
    whole = [l.name for l in graph.layers]
    spent: dict[str, float] = {}  # where the table's time went, for the bench's log
    clock = [time.perf_counter()]

    def took(part: str) -> None:
        now = time.perf_counter()
        spent[part] = round(spent.get(part, 0.0) + now - clock[0], 2)
        clock[0] = now

    sub = extract_subnet(graph, whole)
    feeds = random_feeds(graph, sub.inputs)
    out: dict[str, dict[str, Any]] = {}
    before, built = _device_memory(element), scope.built
    # one lane, then the others over its weights (one pool of the reuse scope)
    first = runners_for(graph, whole, element, 1)
    taken: list[list] = []  # the lanes taken from the pool: the counts first, then more
    busy: list = []
    try:
        one = _device_memory(element)
        lanes = runners_for(graph, whole, element, max(counts))
        taken.append(lanes)
        after = _device_memory(element)
        fresh = scope.built == built + max(counts)  # all built here, none taken from the scope
        if before and one and after and max(counts) > 1 and fresh:
            per_lane = max(1, (after[0] - one[0]) // (max(counts) - 1))
            out["memory"] = {"per_lane_bytes": per_lane, "first_lane_bytes": one[0] - before[0],
                             "free_bytes": after[1],
                             "max_lanes": max(counts) + int(0.9 * after[1] // per_lane)}
        took("lanes built")
        out["staging"] = measure_staging(
            element, max(counts), rows=max(BATCHES),
            row_bytes=sum(graph.tensors[t].nbytes for t in graph.inputs))
        limit = out.get("memory", {}).get("max_lanes")

        def alone_at(k: int, sec: float) -> dict[str, Any]:
            if k > len(taken[-1]):  # the pool's first k: those built so far and new ones
                taken.append(runners_for(graph, whole, element, k))
            return _time_lanes(f"{element.name} with {k} lanes", taken[-1][:k], element, feeds,
                               sec, warmup)

        alone = _two_passes(counts, alone_at, seconds,
                            lambda rates: next_count(rates, limit, more))
        lanes = taken[-1]  # the busy runs time the same counts
        for k, r in alone.items():
            out[str(k)] = {"alone": r["firing"], "alone_fps": r["fps"], "host": r["host"]}
        took("timed alone")
        if busy_elements:
            busy = [rs[0] for rs in runners_for_many(graph, [(whole, e, 1, None)
                                                            for e in busy_elements])]
            took("busy copies built")
            with running_beside(busy, feeds):
                took("busy copies' first frames")
                beside = _two_passes(list(alone), lambda k, sec: _time_lanes(
                    f"{element.name} with {k} lanes beside busy copies", lanes[:k], element,
                    feeds, sec, 1), seconds)
                took("timed beside busy copies")
            took("busy copies' last frames")
            for k, r in beside.items():
                out[str(k)].update(busy=r["firing"], busy_fps=r["fps"], busy_host=r["host"])
    finally:
        release([*first, *(r for t in taken for r in t), *busy])
    out["seconds"] = spent
    return out


def measure_stage_lanes(graph: "CnnGraph", layers: Sequence[str], element: "ProcessingElement",
                        counts: Sequence[int], seconds: float = 1.0, warmup: int = 3
                        ) -> dict[str, dict[str, Any]]:
    """{str(k): {"alone": firing stats, "alone_fps"}} of the sub-network `layers` on `element`
    at each lane count, the other elements idle. Its lanes come from `runners_for`, so a run of
    the plan that holds this stage takes them again inside the same reuse scope."""
    counts = sorted(set(counts) | {1})
    lanes = runners_for(graph, list(layers), element, lanes=max(counts))
    try:
        sub = extract_subnet(graph, list(layers))
        feeds = random_feeds(graph, sub.inputs)
        got = _two_passes(counts, lambda k, sec: _time_lanes(
            f"a stage on {element.name} with {k} lanes", lanes[:k], element, feeds, sec, warmup),
            seconds)
    finally:
        release(lanes)
    return {str(k): {"alone": r["firing"], "alone_fps": r["fps"]} for k, r in got.items()}


def staging_per_byte(table: dict[str, Any]) -> float | None:
    """CPU seconds per input byte a lane's staging copy costs (measure_staging), if measured."""
    st = table.get("staging")
    return float(st["per_byte"]) if st else None


def staged_per_byte(table: dict[str, Any]) -> float | None:
    """Wall seconds per byte of a full batch staged by all of the element's staging threads
    (measure_stager), if measured."""
    st = (table.get("staging") or {}).get("staged")
    return float(st["per_byte"]) if st else None


def host_seconds(table: dict[str, dict[str, Any]], busy: bool, lanes: int) -> float | None:
    """CPU time the driving thread spends per firing with `lanes` lanes (alone, or beside busy
    copies): the median of that run, if measured."""
    h = table.get(str(lanes), {}).get("busy_host" if busy else "host")
    return float(h["median"]) if h else None


def best_count(rates: dict[int, float]) -> int:
    """The lane count of the highest rate {k: frames/s or k / slowdown}; the fewest within 1%
    of it (fewer frames in flight, shorter latency)."""
    top = max(rates.values())
    return min(k for k, r in rates.items() if r >= 0.99 * top)


def best_busy_lanes(table: dict[str, dict[str, Any]]) -> int:
    """The lane count a GPU runs at beside busy CPU copies (the parallel baseline's), from its
    lane table: the busy curve's best within the lanes its memory holds."""
    _, busy = slowdown_curves(table)
    limit = int(table.get("memory", {}).get("max_lanes", 1 << 30))
    rates = {k: k / t for k, t in busy.items() if k <= limit}
    return best_count(rates) if rates else 1


def slowdown_curves(table: dict[str, dict[str, Any]]) -> tuple[dict[int, float], dict[int, float]]:
    """({k: alone firing / alone firing at 1}, {k: busy firing / alone firing at 1}) of one
    element's lane table. A firing at k lanes is k over the frames/s they ran at where the
    table has it (the mean firing, stalls included), else the median firing: with 16 or 24
    lanes on one driving core a few firings wait for the core, and the median missed them
    (alexnet's 24 lanes read 9,057 frames/s by the median, then ran at 6,515-7,422)."""
    def firing(k: str, kind: str) -> float:
        fps = table[k].get(f"{kind}_fps")
        return int(k) / fps if fps else table[k][kind]["median"]

    t1 = firing("1", "alone")
    alone = {int(k): firing(k, "alone") / t1 for k in table if k.isdigit()}
    busy = {int(k): firing(k, "busy") / t1 for k, v in table.items()
            if k.isdigit() and "busy" in v}
    return alone, busy


def batch_key(batch: int, lanes: int) -> str:
    """The batch table's key of (b, k): "b,k"."""
    return f"{batch},{lanes}"


def parse_batch_key(key: str) -> tuple[int, int]:
    """(b, k) of a batch table key "b,k"."""
    b, k = key.split(",")
    return int(b), int(k)


def batch_one_from_lanes(lanes_table: dict[str, Any]) -> dict[str, Any]:
    """The batch table's entries "1,k" from the lane table (measure_lanes), which timed them:
    a batch of one is a plain firing."""
    memory = lanes_table.get("memory", {})
    out: dict[str, Any] = {}
    for k, entry in lanes_table.items():
        if not k.isdigit():
            continue
        row = {"alone": entry["alone"], "alone_fps": entry["alone_fps"]}
        row.update({f: entry[f] for f in ("busy", "busy_fps") if f in entry})
        if "first_lane_bytes" in memory:
            row["memory_bytes"] = int(memory["first_lane_bytes"]
                                      + (int(k) - 1) * memory["per_lane_bytes"])
        out[batch_key(1, int(k))] = row
    return out


def _build_lanes(graph: "CnnGraph", layers: list[str], element: "ProcessingElement",
                 lanes: int, batch: int) -> tuple[list, list[int] | None]:
    """(`lanes` runners of batch `batch`, the device memory [first lane, the others] took at
    build where the backend says it). Built here, not kept in a reuse scope: a table builds
    pools at six batches that a plan runs at one."""
    backend = backend_for(element)
    sub = extract_subnet(graph, layers)
    first = backend.prepare_lanes(sub, element, 1, batch=batch)
    try:
        more = (backend.prepare_lanes(sub, element, lanes - 1, like=first[0], batch=batch)
                if lanes > 1 else [])
    except BaseException:
        release(first)
        raise
    if any(getattr(r, "batch", 1) != batch for r in first + more):
        release(first + more)
        raise BackendError(f"backend {backend.name!r} on {element.name}: its runners do not "
                           f"run batches (batch {batch} asked)")
    got = [getattr(first[0], "memory_bytes", None), getattr(more[0], "memory_bytes", 0)
           if more else 0]
    return first + more, (None if got[0] is None else got)


def measure_batches(graph: "CnnGraph", element: "ProcessingElement",
                    busy_elements: Sequence["ProcessingElement"] = (),
                    batches: Sequence[int] = BATCHES, counts: Sequence[int] = BATCH_LANES,
                    seconds: float = 0.5, warmup: int = 2, budget_s: float | None = None
                    ) -> dict[str, Any]:
    """{"b,k": {"alone": firing stats (seconds per firing of b frames), "alone_fps", "busy":
    firing stats beside busy single-thread copies on `busy_elements`, "busy_fps",
    "memory_bytes" (where the device reports it)}} of the whole model on `element`, plus
    {"skipped": {"b": why}} for the batches not timed and {"seconds": {part: seconds}}.
    Batches are timed coarse to fine (`coarse_to_fine`: the largest, then halfway down in
    turn), each at every lane count of `counts` (two passes of `seconds`, as the lane table),
    alone then beside the busy copies; a batch is left out when the time spent (`budget_s`)
    would not hold it, judged by the batch before it, so that a time limit drops the batches
    between those timed, not the large ones a throughput plan needs, or when the device
    cannot hold its lanes (and then every larger batch)."""
    with reusing_runners():  # the busy copies: the bench's scope where there is one
        return _measure_batches(graph, element, busy_elements, batches, counts, seconds,
                                warmup, budget_s)


def _measure_batches(graph, element, busy_elements, batches, counts, seconds, warmup,
                     budget_s):
    whole = [l.name for l in graph.layers]
    feeds = random_feeds(graph, extract_subnet(graph, whole).inputs)
    counts = sorted(set(counts))
    out: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    spent: dict[str, float] = {}
    started = time.perf_counter()
    last = 0.0  # seconds the batch before took
    busy = [rs[0] for rs in runners_for_many(graph, [(whole, e, 1, None)
                                                    for e in busy_elements])]
    spent["busy copies built"] = round(time.perf_counter() - started, 2)
    try:
        order = coarse_to_fine(batches)
        for n, b in enumerate(order):
            t0 = time.perf_counter()
            if str(b) in skipped:  # a smaller batch did not fit
                continue
            if budget_s is not None and n and t0 - started + last > budget_s:
                skipped.update({str(x): f"the batch table's {budget_s:.1f} s would be passed"
                                for x in order[n:] if str(x) not in skipped})
                break
            try:
                lanes, memory = _build_lanes(graph, whole, element, max(counts), b)
            except BackendError as e:
                skipped.update({str(x): str(e) for x in order if x >= b})
                continue
            try:
                _time_batch(out, element, lanes, memory, feeds, b, counts, seconds, warmup,
                            busy)
            finally:
                release(lanes)
            last = time.perf_counter() - t0
            spent[f"batch {b}"] = round(last, 2)
    finally:
        release(busy)
    if skipped:
        out["skipped"] = skipped
    out["seconds"] = spent
    return out


def coarse_to_fine(batches: Sequence[int]) -> list[int]:
    """`batches` in the order a time limit should cut them: the largest, then the one halfway
    (by index) between it and batch 1 (the lane table's), then halfway into each gap in turn:
    (2, 4, 8, 16, 32) -> 32, 8, 4, 16, 2."""
    vs = sorted(set(batches))
    order, gaps = [], collections.deque([(-1, len(vs) - 1)])
    if vs:
        order.append(vs[-1])
    while gaps:
        lo, hi = gaps.popleft()
        if hi - lo < 2:
            continue
        mid = (lo + hi + 1) // 2
        order.append(vs[mid])
        gaps.extend([(lo, mid), (mid, hi)])
    return order


def _time_batch(out, element, lanes, memory, feeds, b, counts, seconds, warmup, busy):
    """The entries "b,k" of each lane count: alone, then beside the busy copies."""
    def timed(what: str, w: int):
        return lambda k, sec: _time_lanes(f"{element.name} {what}with {k} lanes of batch {b}",
                                          lanes[:k], element, feeds, sec, w, b)

    alone = _two_passes(counts, timed("", warmup), seconds)
    for k, r in alone.items():
        entry = out[batch_key(b, k)] = {"alone": r["firing"], "alone_fps": r["fps"],
                                        "host": r["host"]}
        if memory is not None and memory[0]:
            per_lane = memory[1] / max(1, len(lanes) - 1)
            entry["memory_bytes"] = int(memory[0] + (k - 1) * per_lane)
    if busy:
        with running_beside(busy, feeds):
            beside = _two_passes(counts, timed("beside busy copies ", 1), seconds)
        for k, r in beside.items():
            out[batch_key(b, k)].update(busy=r["firing"], busy_fps=r["fps"],
                                        busy_host=r["host"])


def measure_stage_batches(graph: "CnnGraph", layers: Sequence[str],
                          element: "ProcessingElement", pairs: Sequence[tuple[int, int]],
                          seconds: float = 1.0, warmup: int = 3) -> dict[str, dict[str, Any]]:
    """{"b,k": {"alone": firing stats, "alone_fps"}} of the sub-network `layers` on `element`
    at each (batch, lanes) of `pairs`, the other elements idle (as measure_stage_lanes, whose
    runners come from `runners_for`, so a run of the plan that holds this stage takes them
    again inside the same reuse scope)."""
    sub = extract_subnet(graph, list(layers))
    feeds = random_feeds(graph, sub.inputs)
    out: dict[str, dict[str, Any]] = {}
    for b in sorted({b for b, _ in pairs}):
        counts = sorted({k for x, k in pairs if x == b})
        lanes = runners_for(graph, list(layers), element, lanes=max(counts), batch=b)
        try:
            got = _two_passes(counts, lambda k, sec: _time_lanes(
                f"a stage on {element.name} with {k} lanes of batch {b}", lanes[:k], element,
                feeds, sec, warmup, b), seconds)
        finally:
            release(lanes)
        out.update({batch_key(b, k): {"alone": r["firing"], "alone_fps": r["fps"]}
                    for k, r in got.items()})
    return out


def measure_cpu_batches(graph: "CnnGraph", element: "ProcessingElement",
                        batches: Sequence[int] = CPU_BATCHES, repeats: int = 10,
                        warmup: int = 2, margin: float = CPU_BATCH_MARGIN
                        ) -> tuple[dict[str, Any], dict[str, float]]:
    """(the batch table of the whole model on CPU element `element`: {"b,1": {"alone":
    firing stats}} of batch 1 and of each batch that ran a frame at least `margin` faster
    than batch 1, or {} when none did; {str(b): seconds a frame, the median} of every batch
    timed, to report). ONNX Runtime's `benchmark` (outputs bound once) times each batch, in
    two passes (batches up, then down), keeping each batch's faster pass: on a shared machine
    another process slows a pass down, never speeds it up, and single passes on the 2-core VM
    moved a batch's time a frame by up to 40% from one run to the next."""
    whole = [l.name for l in graph.layers]
    sub = extract_subnet(graph, whole)
    feeds = random_feeds(graph, sub.inputs)
    backend = backend_for(element)
    order = sorted(set(batches) | {1})
    runners = {}
    firings: dict[int, dict[str, Any]] = {}
    try:
        for b in order:
            runners[b] = backend.prepare(sub, element, batch=b)
        for b in order + order[::-1]:
            runner = runners[b]
            staged = gather([feeds], runner.inputs, b, f"{element.name} at batch {b}")
            with pinned(runner.caller_cores or element.cores):
                got = stats(runner.benchmark(staged, repeats=repeats, warmup=warmup))
            if b not in firings or got["median"] < firings[b]["median"]:
                firings[b] = got
    finally:
        release(runners.values())
    per_frame = {b: f["median"] / b for b, f in firings.items()}
    faster = [b for b in order if b > 1 and per_frame[b] <= (1 - margin) * per_frame[1]]
    table = ({batch_key(b, 1): {"alone": firings[b]} for b in [1, *faster]} if faster else {})
    return table, {str(b): t for b, t in per_frame.items()}
