"""An estimated (not measured) profile of a 16-core + 1 GPU server for zoo models, for tests
that need a real CNN's shape with known times: a layer takes `flops / CPU_FLOPS + 5 us` on one
core and 1/`gpu_speedup` of that on the GPU; moving n bytes costs `a + n * b` over a PCIe-like
link to the GPU and a memory-copy link between cores."""
from __future__ import annotations

import numpy as np

from hetflow.mapping.problem import Problem
from hetflow.model import resolve_model
from hetflow.platform.spec import ProcessingElement

CPU_FLOPS = 50e9  # one core, fp32 with SIMD
LAYER_OVERHEAD = 5e-6  # per layer on a core (dispatch, memory traffic of small layers)
GPU_SPEEDUP = 20.0
LINKS = {  # (latency s, seconds per byte)
    "cpu-cpu": (5e-6, 1 / 10e9),
    "cpu-gpu": (15e-6, 1 / 12e9),
}


def server_elements(n_cores: int = 16) -> list[ProcessingElement]:
    """`n_cores` single-core elements and one GPU driven by core `n_cores`."""
    cpus = [ProcessingElement(f"cpu{i}", "cpu", (i,), cluster="xeon", power_w=6.0)
            for i in range(n_cores)]
    gpu = ProcessingElement("gpu0", "gpu", (n_cores,), device_index=0, model="synthetic-gpu",
                            power_w=300.0)
    return [*cpus, gpu]


def synthetic_problem(model: str, n_cores: int = 16, gpu_speedup: float = GPU_SPEEDUP,
                      fuse: bool = True) -> Problem:
    graph = resolve_model(model, fuse=fuse)
    elements = server_elements(n_cores)
    cpu = np.array([(l.flops or 0) / CPU_FLOPS + LAYER_OVERHEAD for l in graph.layers])
    times = np.column_stack([cpu if e.kind == "cpu" else cpu / gpu_speedup for e in elements])
    kind = {e.name: e.kind for e in elements}

    def transfer(nbytes: int, src: str, dst: str) -> float:
        if src == dst:
            return 0.0
        a, b = LINKS["cpu-gpu" if "gpu" in (kind[src], kind[dst]) else "cpu-cpu"]
        return a + nbytes * b

    return Problem(graph, elements, times, transfer)


def load_bounds(g) -> tuple[float, float]:
    """(largest element load, largest element load plus its channels' transfer times) of a
    timed graph whose actors are the elements."""
    load = {a.name: sum(a.exec_times) for a in g.actors}
    with_transfers = dict(load)
    for c in g.channels:
        if c.src != c.dst:
            with_transfers[c.src] += c.transfer_time
            with_transfers[c.dst] += c.transfer_time
    return max(load.values()), max(with_transfers.values())
