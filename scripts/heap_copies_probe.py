"""Do parallel copies run slower in a process with a big heap (as inside the bench), and does
freezing it (`runtime.harness.frozen_heap`, which the engine and the baselines take) give that
back? `measure_parallel` of MODEL on every core of this machine, first with a small heap, then
with about 4 million more objects, alternately without the freeze (patched out) and with it,
three rounds of 2 s. Usage: python scripts/heap_copies_probe.py [MODEL]   (default googlenet)"""
from __future__ import annotations

import contextlib
import gc
import json
import sys

import hetflow.runtime.baselines as baselines
from hetflow.backends.reuse import reusing_runners
from hetflow.bench.core import baseline_elements
from hetflow.model import resolve_model
from hetflow.platform import resolve_platform
from hetflow.runtime.inputs import random_source


def main(model: str) -> None:
    plat = resolve_platform("auto")
    _, els = baseline_elements(plat)  # the parallel copies' elements
    graph = resolve_model(model, fuse=True)
    src = random_source(graph)
    frozen_heap = baselines.frozen_heap
    heap: list = []
    with reusing_runners():
        for big in (False, True):
            if big:  # a heap like the bench's: models, profiles, plans
                heap = [resolve_model(m) for m in ("resnet18", "densenet121", "googlenet")]
                heap.append([{"a": i, "b": [i]} for i in range(2_000_000)])
            for rnd in range(3):
                for frozen in (False, True):
                    baselines.frozen_heap = frozen_heap if frozen else contextlib.nullcontext
                    gc.collect()
                    r = baselines.measure_parallel(graph, els, src, warmup=3, seconds=2.0)
                    print(json.dumps({"big_heap": big, "frozen": frozen, "round": rnd,
                                      "fps": round(r.throughput, 1),
                                      "objects": len(gc.get_objects())}), flush=True)
    baselines.frozen_heap = frozen_heap


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "googlenet")
