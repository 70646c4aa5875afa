"""How GPU lanes are driven, measured: frames/s of the whole model on GPU 0 at 1-16 lanes (one
thread on the GPU's driving core keeping k runs in flight, as the runtime drives them), waiting
for the oldest run on a blocking CUDA event ("block") or a spinning one ("spin"), alone and
beside single-thread ONNX Runtime copies on the other cores; the CPU copies' frames/s show what
a spinning wait costs them. Usage: python scripts/gpu_lanes_sync.py MODEL [MODEL ...]"""
from __future__ import annotations

import json
import os
import sys
import time

from hetflow.backends import backend_for
from hetflow.model import resolve_model
from hetflow.model.subnet import extract_subnet
from hetflow.platform import resolve_platform
from hetflow.platform.configs import finest_config
from hetflow.profile.lanes import _time_lanes, running_beside
from hetflow.profile.measure import random_feeds


def main(models: list[str]) -> None:
    plat = resolve_platform("auto", check_devices=True)
    gpu = next(e for e in plat.all_elements() if e.kind == "gpu")
    finest = finest_config(plat)
    cpus = [e for e in finest.elements if e.kind == "cpu"]
    rows = []
    for name in models:
        graph = resolve_model(name, fuse=True)
        sub = extract_subnet(graph, [l.name for l in graph.layers], name=name)
        feeds = random_feeds(graph, sub.inputs)
        busy = [backend_for(e).prepare(sub, e) for e in cpus]
        for sync in ("block", "spin"):
            lanes = backend_for(gpu).prepare_lanes(sub, gpu, 16, sync=sync)
            for k in (1, 2, 4, 8, 16):
                alone = _time_lanes("alone", lanes[:k], gpu, feeds, 1.0, 3)
                with running_beside(busy, feeds) as finished:
                    n0, t0 = finished(), time.perf_counter()
                    crowd = _time_lanes("busy", lanes[:k], gpu, feeds, 1.0, 1)
                    cpu_fps = (finished() - n0) / (time.perf_counter() - t0)
                rows.append({"model": name, "sync": sync, "lanes": k, "gpu_fps": alone["fps"],
                             "gpu_fps_busy": crowd["fps"], "cpu_fps_busy": cpu_fps,
                             "firing_ms": alone["firing"]["median"] * 1e3,
                             "firing_ms_busy": crowd["firing"]["median"] * 1e3})
                print(json.dumps(rows[-1]), flush=True)
            for r in lanes:
                r.close()
        for r in busy:
            r.close()
    print(f"{'model':14} {'sync':6} {'k':>2} {'alone fps':>10} {'busy fps':>10} {'cpu fps':>8} "
          f"{'firing ms':>10}")
    for r in rows:
        print(f"{r['model']:14} {r['sync']:6} {r['lanes']:>2} {r['gpu_fps']:>10.0f} "
              f"{r['gpu_fps_busy']:>10.0f} {r['cpu_fps_busy']:>8.0f} {r['firing_ms']:>10.2f}")
    with open(os.path.join(os.environ.get("OUT", "."), "lanes_sync.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:] or ["resnet18"])
