"""Where a GPU stage's firing time goes when its input comes from another stage (GPU machine).

For the GPU stage of saved plans (e.g. a bench's pipeline plans), k lanes on the GPU's driving
core each fire for `--seconds`, fed three ways:
  same   the same input arrays every firing (what the profile's lane table does);
  pool   a ring of 32 distinct arrays written beforehand (cold in cache, no allocation);
  fresh  a new array each firing, written by a producer thread on another core, as a CPU stage
         hands its output over (allocation, page faults, cross-core reads, frees);
each alone and beside single-thread CPU copies of the stage busy on other cores. Prints firing
time, frames/s and the driving thread's CPU time per firing, and the time of np.copyto of the
input alone. Usage: python scripts/lane_host_probe.py PLAN.json[:MODEL] ... [--lanes 8]
"""
from __future__ import annotations

import argparse
import queue
import threading
import time

import numpy as np

from hetflow.backends import backend_for, pin_current_thread
from hetflow.mapping.plan import Plan
from hetflow.model import resolve_model
from hetflow.model.subnet import extract_subnet
from hetflow.profile.measure import random_feeds


def drive(lanes, element, feed_of, seconds, busy=()):
    times, cpu = [], []
    stop = threading.Event()
    lock = threading.Lock()

    def lane(r, i):
        pin_current_thread(element.cores[:1])
        n = 0
        while not stop.is_set():
            feeds = feed_of(i, n)
            t0, c0 = time.perf_counter(), time.thread_time()
            r.run(feeds)
            with lock:
                times.append(time.perf_counter() - t0)
                cpu.append(time.thread_time() - c0)
            n += 1

    def copy(r, core, feeds):
        pin_current_thread([core])
        while not stop.is_set():
            r.run(feeds)

    ts = [threading.Thread(target=lane, args=(r, i), daemon=True) for i, r in enumerate(lanes)]
    ts += [threading.Thread(target=copy, args=b, daemon=True) for b in busy]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join(5)
    el = time.perf_counter() - t0
    return np.median(times) * 1e3, len(times) / el, np.median(cpu) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("plans", nargs="+")
    ap.add_argument("--lanes", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--busy", type=int, default=11)
    a = ap.parse_args()
    for spec in a.plans:
        path, _, model = spec.partition(":")
        plan = Plan.load(path)
        graph = resolve_model(model or plan.model_name, None, plan.fuse)
        gpu = next(e for e in plan.elements.values() if e.kind == "gpu")
        phase = next(p for act, ps in plan.app.phases.items() for p in ps if act == gpu.name)
        sub = extract_subnet(graph, phase.layers, name="stage")
        base = random_feeds(graph, sub.inputs)
        nbytes = sum(x.nbytes for x in base.values())
        lanes = backend_for(gpu).prepare_lanes(sub, gpu, a.lanes)
        cpu_cores = [c for c in range(16) if c not in gpu.cores][:a.busy]
        from hetflow.platform.spec import ProcessingElement
        busy = []
        for c in cpu_cores:
            pe = ProcessingElement(name=f"cpu{c}", kind="cpu", cores=(c,))
            busy.append((backend_for(pe).prepare(sub, pe), c, base))
        pool = [{k: v + i for k, v in base.items()} for i in range(32)]
        q: queue.Queue = queue.Queue(maxsize=4 * a.lanes)
        stop = threading.Event()

        def producer():
            pin_current_thread([cpu_cores[-1] if cpu_cores else 0])
            while not stop.is_set():
                try:
                    q.put({k: np.multiply(v, 1.0, dtype=v.dtype) for k, v in base.items()},
                          timeout=0.1)
                except queue.Full:
                    pass
        prod = threading.Thread(target=producer, daemon=True)
        prod.start()
        feeders = {"same": lambda i, n: base, "pool": lambda i, n: pool[(i * 7 + n) % 32],
                   "fresh": lambda i, n: q.get()}
        dst = np.empty_like(next(iter(base.values())))
        t0 = time.perf_counter()
        for x in pool * 4:
            np.copyto(dst, next(iter(x.values())))
        cp = (time.perf_counter() - t0) / (len(pool) * 4) * 1e3
        print(f"{spec}: GPU stage {len(phase.layers)} layers, input {nbytes / 1e6:.2f} MB, "
              f"np.copyto of it {cp:.3f} ms", flush=True)
        for k in sorted({1, a.lanes}):
            for name, feed in feeders.items():
                for with_busy in (False, True):
                    ms, fps, host = drive(lanes[:k], gpu, feed, a.seconds,
                                          busy if with_busy else ())
                    print(f"  k={k} {name:5s} {'busy' if with_busy else 'alone'}: firing "
                          f"{ms:.2f} ms, {fps:.0f} frames/s, host CPU {host:.3f} ms/firing",
                          flush=True)
        stop.set()
        for r in lanes:
            r.close()


if __name__ == "__main__":
    main()
