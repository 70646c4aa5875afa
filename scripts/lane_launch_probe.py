"""What one GPU run costs the thread that drives the lanes (GPU machine).

For each MODEL:K, the whole model on GPU 0 at K lanes, one thread on the GPU's driving core
keeping K runs in flight (`backends.inflight.InFlight`, as the engine and the baselines drive
them), two runner kinds alternately in half-second windows:
  copies_out   the border copies launched one by one beside the CUDA graph of the forward;
  copies_in    the border copies captured inside the graph (one launch a run).
Per window: frames/s and the driving thread's host time per frame (submit, and collect once the
run is done; the wait left out). Then the pieces of one submit, timed alone on one lane. Both
kinds' outputs are compared on one frame. Rows go to $OUT/lane_launch.json.
Usage: python scripts/lane_launch_probe.py MODEL:K [MODEL:K ...] [--windows 6]
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from hetflow.backends import backend_for, pin_current_thread
from hetflow.backends.inflight import InFlight
from hetflow.model import resolve_model
from hetflow.model.subnet import extract_subnet
from hetflow.platform import resolve_platform
from hetflow.profile.measure import random_feeds


def window(lanes, feeds, seconds: float) -> tuple[float, float]:
    runs = InFlight(lanes)
    n, host = 0, 0.0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        while runs.has_room():
            s = time.perf_counter()
            runs.submit(feeds)
            host += time.perf_counter() - s
        runs.wait()
        s = time.perf_counter()
        runs.collect()
        host += time.perf_counter() - s
        n += 1
    while len(runs):
        runs.collect()
        n += 1
    return n / (time.perf_counter() - t0), host / n * 1e6


def per_call_us(fn, n: int = 2000) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def pieces(runner, feeds) -> dict:
    import torch

    name = runner.inputs[0]
    host_np = runner._host_in_np[0]
    out = {"copyto_input_us": per_call_us(lambda: np.copyto(host_np, feeds[name])),
           "input_bytes": int(sum(np.asarray(v).nbytes for v in feeds.values()))}

    def contexts():
        with torch.cuda.device(runner._device), torch.cuda.stream(runner._stream):
            pass
    out["device_stream_contexts_us"] = per_call_us(contexts)
    out["set_stream_us"] = per_call_us(lambda: torch.cuda.set_stream(runner._stream))
    out["current_stream_us"] = per_call_us(torch.cuda.current_stream)
    torch.cuda.set_stream(torch.cuda.default_stream(runner._device))
    out["event_record_us"] = per_call_us(lambda: runner._done.record(runner._stream))
    runner.synchronize()
    out["event_query_us"] = per_call_us(runner.finished)
    t_submit, t_collect = [], []
    for _ in range(500):
        s = time.perf_counter()
        runner.submit(feeds)
        t_submit.append(time.perf_counter() - s)
        runner.wait()
        s = time.perf_counter()
        runner.collect()
        t_collect.append(time.perf_counter() - s)
    out["submit_us"] = float(np.median(t_submit) * 1e6)
    out["collect_after_wait_us"] = float(np.median(t_collect) * 1e6)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("specs", nargs="+")
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=0.5)
    a = ap.parse_args()
    plat = resolve_platform("auto", check_devices=True)
    gpu = next(e for e in plat.all_elements() if e.kind == "gpu")
    pin_current_thread(gpu.cores[:1])
    rows = []
    for spec in a.specs:
        model, _, k = spec.partition(":")
        k = int(k or 16)
        graph = resolve_model(model, fuse=True)
        sub = extract_subnet(graph, [l.name for l in graph.layers], name=model)
        feeds = random_feeds(graph, sub.inputs)
        back = backend_for(gpu)
        kinds = {"copies_out": back.prepare_lanes(sub, gpu, k, graph_copies=False)}
        kinds["copies_in"] = back.prepare_lanes(sub, gpu, k, graph_copies=True,
                                                like=kinds["copies_out"][0])
        ref, got = kinds["copies_out"][0].run(feeds), kinds["copies_in"][0].run(feeds)
        equal = all(np.array_equal(ref[n], got[n]) for n in ref)
        row = {"model": model, "lanes": k, "outputs_equal": equal,
               "copies_in_graph": kinds["copies_in"][0].copies_in_graph,
               "windows": {kind: [] for kind in kinds}, "pieces": {}}
        for _ in range(a.windows):
            for kind, lanes in kinds.items():
                fps, host_us = window(lanes, feeds, a.seconds)
                row["windows"][kind].append({"fps": round(fps), "host_us": round(host_us, 1)})
        for kind, lanes in kinds.items():
            row["pieces"][kind] = pieces(lanes[0], feeds)
            for r in lanes:
                r.close()
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"{'model':16} {'k':>3} {'kind':11} {'fps (windows)':>34} {'host us/frame':>22}")
    for r in rows:
        for kind, ws in r["windows"].items():
            fps = [w["fps"] for w in ws]
            host = [w["host_us"] for w in ws]
            print(f"{r['model']:16} {r['lanes']:>3} {kind:11} "
                  f"{min(fps):>8}-{max(fps):<8} median {int(np.median(fps)):>7} "
                  f"{min(host):>8.1f}-{max(host):<8.1f}")
        print("   pieces:", json.dumps(r["pieces"]))
    with open(os.path.join(os.environ.get("OUT", "."), "lane_launch.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
