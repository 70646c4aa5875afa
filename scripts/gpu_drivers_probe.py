"""What the CPU copies beside a fast CNN's GPU cost it, and whether one driving thread is its
bottleneck: the parallel copies (`measure_parallel`, the GPU at LANES lanes) in variants
  cK   the GPU and K single-core CPU copies (c0: the GPU alone; c15: the parallel baseline on
       the 16-core machine);
  cKx2 the same with the GPU's lanes split over two driving threads, the second on the last
       CPU copy's core (that copy dropped).
Variants alternate within each round (ROUNDS rounds, SECONDS each run, the order reversed
every other round); medians of each variant's total and of its GPU share (frames/s). GPU
machine.
Usage: [VARIANTS="c0 c0x2 c15 c15x2"] [ROUNDS=3] [SECONDS=1.5] [LANES=24]
       python scripts/gpu_drivers_probe.py MODEL ..."""
import dataclasses
import json
import os
import statistics
import sys

from hetflow.backends.reuse import reusing_runners
from hetflow.model import resolve_model
from hetflow.platform import resolve_platform
from hetflow.platform.configs import resolve_config
from hetflow.runtime.baselines import measure_parallel
from hetflow.runtime.inputs import random_source

ROUNDS = int(os.environ.get("ROUNDS", 3))
SECONDS = float(os.environ.get("SECONDS", 1.5))
LANES = int(os.environ.get("LANES", 24))

plat = resolve_platform("auto", check_devices=True)
finest = resolve_config(plat, {cl.name: [1] * len(plat.free_cores(cl)) for cl in plat.clusters})
els = [e for e in finest.elements if e.backend != "none"]
gpu = next(e for e in els if e.kind == "gpu")
cpus = [e for e in els if e.kind == "cpu"]
# the second driver of the same device, on the last CPU copy's core
gpu_b = dataclasses.replace(gpu, name=f"{gpu.name}b", cores=cpus[-1].cores)
half = LANES // 2


def members_of(name: str) -> tuple[list, dict]:
    """cK: the GPU and the first K CPU copies; cKx2: its lanes over two drivers."""
    k, _, drivers = name[1:].partition("x")
    k = int(k)
    if drivers == "2":
        return [*cpus[:min(k, len(cpus) - 1)], gpu, gpu_b], {gpu.name: half,
                                                             gpu_b.name: LANES - half}
    return [*cpus[:k], gpu], {gpu.name: LANES}


VARIANTS = {v: members_of(v) for v in os.environ.get("VARIANTS", "c0 c4 c8 c12 c15").split()}
rows = []
with reusing_runners():
    for model in sys.argv[1:]:
        graph = resolve_model(model, fuse=True)
        src = random_source(graph)
        runs = {v: [] for v in VARIANTS}
        for r in range(ROUNDS):
            order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
            for v in order:
                members, lanes = VARIANTS[v]
                rep = measure_parallel(graph, members, src, warmup=5, seconds=SECONDS,
                                       lanes=lanes)
                on_gpu = sum(x for e, x in rep.notes["per_element_fps"].items()
                             if e in (gpu.name, gpu_b.name))
                runs[v].append((rep.throughput, on_gpu, rep.latency["p99"]))
        for v, rs in runs.items():
            row = {"model": model, "variant": v, "lanes": LANES,
                   "fps": round(statistics.median(x[0] for x in rs)),
                   "gpu_fps": round(statistics.median(x[1] for x in rs)),
                   "p99_ms": round(statistics.median(x[2] for x in rs) * 1e3, 2),
                   "runs": [round(x[0]) for x in rs]}
            rows.append(row)
            print(json.dumps(row), flush=True)
        with open(os.path.join(os.environ.get("OUT", "."), "gpu_drivers_probe.json"), "w") as f:
            json.dump({"command": "python scripts/gpu_drivers_probe.py " + " ".join(sys.argv[1:]),
                       "rounds": ROUNDS, "seconds": SECONDS, "rows": rows}, f, indent=1)
