"""Which calls of a GPU lane's cycle give the interpreter lock up or hold it long, and what the
lane's host work costs the GPU beside CPU copies that share the lock (GPU machine).

1. Each call of a lane's cycle, timed with a thread spinning in Python beside it at a switch
   interval of 20 ms: a call that gives the lock up takes it back only when the spinner is made
   to let go (about 20 ms), one that keeps it takes its own time. Without the spinner, the
   call's own time.
2. The parallel copies (the GPU at LANES lanes beside single-thread CPU copies on the other
   cores, `measure_parallel`) in turn with the runner as it is (`code`), with torch.cuda's
   public stream calls in submit (`public_streams`) and with the frame's input copy made under
   the lock (`held_copies`, a memcpy through memoryviews instead of numpy's, which gives the
   lock up), ROUNDS rounds of SECONDS each: the total and the GPU's share.
Usage: [LANES=24 ROUNDS=4 SECONDS=2] python scripts/gil_copies_probe.py MODEL ...
Writes $OUT/gil_copies_probe.json."""
import json
import os
import statistics
import sys
import threading
import time

import numpy as np

import hetflow.backends.torch_cuda as tc
from hetflow.backends.reuse import reusing_runners, runners_for
from hetflow.bench.core import baseline_elements
from hetflow.model import resolve_model
from hetflow.platform import resolve_platform
from hetflow.runtime.baselines import measure_parallel
from hetflow.runtime.inputs import random_source

LANES = int(os.environ.get("LANES", 24))
ROUNDS = int(os.environ.get("ROUNDS", 4))
SECONDS = float(os.environ.get("SECONDS", 2))
code_current, code_set = tc.current_stream_ids, tc.set_stream_ids
code_stage = tc.TorchCudaRunner._stage_input


def held(dst, src):
    memoryview(dst).cast("B")[:] = memoryview(src).cast("B")


def held_stage(self, name, feeds, dst):
    held(dst, feeds[name])


def public_current(torch, index):
    return torch.cuda.current_stream(index)


_streams: dict = {}


def public_set(torch, ids):
    """torch.cuda.set_stream with the lane's Stream object at hand, as the runner had it."""
    if not isinstance(ids, torch.cuda.Stream):
        ids = _streams.get(ids) or _streams.setdefault(ids, torch.cuda.Stream(
            stream_id=ids[0], device_index=ids[1], device_type=ids[2]))
    torch.cuda.set_stream(ids)


VARIANTS = {"code": (code_current, code_set, code_stage),
            "public_streams": (public_current, public_set, code_stage),
            "held_copies": (code_current, code_set, held_stage)}


def per_call(fn, n=5, spinner=False):
    """Median seconds a call, with or without a thread spinning in Python."""
    stop, t = threading.Event(), None
    if spinner:
        def spin():
            while not stop.is_set():
                pass
        t = threading.Thread(target=spin, daemon=True)
        t.start()
        time.sleep(0.05)
    times = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    finally:
        stop.set()
        if t:
            t.join()
    return statistics.median(times)


def lock_table(model: str, gpu) -> list[dict]:
    import torch

    graph = resolve_model(model, fuse=True)
    (r,) = runners_for(graph, [l.name for l in graph.layers], gpu, 1, f"whole@{gpu.name}")
    x = random_source(graph)(0)
    big_in = next(iter(x.values()))
    host_out = r._host_out_np[0]
    r.submit(x)
    r.wait()
    done = r._done
    calls = {
        "np.copyto (input frame)": lambda: np.copyto(r._host_in_np[0], big_in),
        "memoryview copy (input frame)": lambda: held(r._host_in_np[0], big_in),
        "ndarray.copy (output)": lambda: host_out.copy(),
        "graph.replay": lambda: r._graph.replay(),
        "Event.record": lambda: done.record(r._stream),
        "Event.query (complete)": lambda: done.query(),
        "Event.synchronize (complete)": lambda: done.synchronize(),
        "torch.cuda.current_stream": lambda: torch.cuda.current_stream(),
        "torch.cuda.set_stream (a Stream at hand)": lambda: torch.cuda.set_stream(r._stream),
        "current_stream_ids": lambda: tc.current_stream_ids(torch, 0),
        "set_stream_ids": lambda: tc.set_stream_ids(torch, r._stream_ids),
        "runner.submit + wait": lambda: (r.submit(x), r.wait()),
        "runner.collect (complete)": lambda: r.collect(),
    }
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.02)
    rows = []
    try:
        for name, fn in calls.items():
            fn()
            torch.cuda.synchronize()
            alone = per_call(fn)
            beside = per_call(fn, spinner=True)
            torch.cuda.synchronize()
            rows.append({"call": name, "alone_us": round(alone * 1e6, 1),
                         "beside_spinner_us": round(beside * 1e6, 1),
                         "gives_lock_up": beside > 0.01})
            print(json.dumps({"model": model, **rows[-1]}), flush=True)
    finally:
        sys.setswitchinterval(old)
        torch.cuda.synchronize()
    return rows


def main() -> None:
    plat = resolve_platform("auto", check_devices=True)
    _, els = baseline_elements(plat)  # the parallel copies' elements
    gpu = next(e for e in els if e.kind == "gpu")
    out = {"lanes": LANES, "rounds": ROUNDS, "seconds": SECONDS, "models": {}}
    with reusing_runners():
        for model in sys.argv[1:]:
            graph = resolve_model(model, fuse=True)
            src = random_source(graph)
            table = lock_table(model, gpu)
            names = list(VARIANTS)
            runs: dict[str, list] = {v: [] for v in names}
            for i in range(ROUNDS):
                for variant in names[i % len(names):] + names[:i % len(names)]:
                    (tc.current_stream_ids, tc.set_stream_ids,
                     tc.TorchCudaRunner._stage_input) = VARIANTS[variant]
                    r = measure_parallel(graph, els, src, warmup=5, seconds=SECONDS,
                                         lanes={gpu.name: LANES})
                    share = r.notes["per_element_fps"].get(gpu.name, 0.0)
                    runs[variant].append([round(r.throughput, 1), round(share, 1)])
                    print(json.dumps({"model": model, "variant": variant,
                                      "fps": runs[variant][-1][0], "gpu_fps": runs[variant][-1][1]}),
                          flush=True)
            tc.current_stream_ids, tc.set_stream_ids, tc.TorchCudaRunner._stage_input = \
                VARIANTS["code"]
            med = {v: statistics.median(x[0] for x in rs) for v, rs in runs.items()}
            gpu_med = {v: statistics.median(x[1] for x in rs) for v, rs in runs.items()}
            out["models"][model] = {"lock_table": table, "runs": runs, "median_fps": med,
                                    "median_gpu_fps": gpu_med}
            print(json.dumps({"model": model, "median_fps": med, "median_gpu_fps": gpu_med}),
                  flush=True)
    path = os.path.join(os.environ.get("OUT", "."), "gil_copies_probe.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
