"""Random mapping problems for the search-strategy tests.

Instances: a random CNN from `random_cnn_graph`, identical little cores, optionally a faster
"big" core and a GPU, random layer times with a per-(layer, kind) affinity (so different kinds
prefer different layers), and a linear transfer model.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from hetflow.mapping.problem import Problem
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform.spec import ProcessingElement

# ---------------------------------------------------------------- random problems

KIND_SPEED = {"cpu": 1.0, "gpu": 6.0}


def linear_transfer(elements: list[ProcessingElement], latency: float = 20e-6,
                    seconds_per_byte: float = 2e-9):
    """Moving n bytes between two different elements costs latency + n * seconds_per_byte,
    twice as much when a GPU is at either end (a host-device copy); same element: free."""
    kind = {e.name: e.kind for e in elements}

    def transfer(nbytes: int, src: str, dst: str) -> float:
        if src == dst:
            return 0.0
        factor = 2.0 if "gpu" in (kind[src], kind[dst]) else 1.0
        return factor * (latency + nbytes * seconds_per_byte)

    return transfer


def make_elements(n_cpu: int, n_gpu: int = 0, big: int = 0, power: bool = True
                  ) -> list[ProcessingElement]:
    """`n_cpu` identical single cores ('cpu0'...), `big` faster cores of another cluster, and
    GPUs with their own driving cores; powers set unless `power` is False."""
    els = [ProcessingElement(f"cpu{i}", "cpu", (i,), cluster="little",
                             power_w=2.0 if power else None) for i in range(n_cpu)]
    els += [ProcessingElement(f"big{i}", "cpu", (100 + i,), cluster="big",
                              power_w=5.0 if power else None) for i in range(big)]
    els += [ProcessingElement(f"gpu{i}", "gpu", (200 + i,), device_index=i, model="gpu",
                              power_w=15.0 if power else None) for i in range(n_gpu)]
    return els


def make_problem(n_layers: int, elements: list[ProcessingElement], seed: int = 0,
                 call_overhead: float = 30e-6, transfer=None, **kw) -> Problem:
    """A random CNN with layer times = random work x per-kind speed x a per-(layer, kind)
    affinity, so that different kinds prefer different layers; identical elements (same
    equivalence key) get identical columns, as a profile would give them."""
    rng = np.random.default_rng(seed)
    graph = random_cnn_graph(n_layers, seed)
    work = rng.uniform(0.2e-3, 2e-3, len(graph.layers))
    columns, cache = [], {}
    for e in elements:
        key = e.equivalence_key
        if key not in cache:
            speed = KIND_SPEED.get(e.kind, 1.0) * (1.6 if e.cluster == "big" else 1.0)
            affinity = rng.uniform(0.5, 1.5, len(graph.layers))
            cache[key] = work * affinity / speed
        columns.append(cache[key])
    return Problem(graph, elements, np.column_stack(columns),
                   transfer or linear_transfer(elements), call_overhead=call_overhead, **kw)


def random_small_problem(seed: int, max_layers: int = 12, max_elements: int = 4) -> Problem:
    """A random instance with 2..max_layers layers and 2..max_elements elements of up to three
    kinds (identical little cores, a big core, a GPU)."""
    rng = np.random.default_rng(10_000 + seed)
    n_layers = int(rng.integers(3, max_layers + 1))
    n_el = int(rng.integers(2, max_elements + 1))
    n_gpu = int(rng.integers(0, 2))
    big = int(rng.integers(0, 2)) if n_el - n_gpu > 1 else 0
    n_cpu = max(0, n_el - n_gpu - big)
    return make_problem(n_layers, make_elements(n_cpu, n_gpu, big), seed=seed)


@pytest.fixture(scope="session")
def factory():
    """make_problem, make_elements, random_small_problem and linear_transfer, for tests."""
    return SimpleNamespace(problem=make_problem, elements=make_elements,
                           small=random_small_problem, transfer=linear_transfer)
