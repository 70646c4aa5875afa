"""Small multi-application problems built without profiles: random CNNs with synthetic layer
times on a few identical CPU cores and a GPU."""
from __future__ import annotations

import numpy as np
import pytest

from hetflow.mapping.problem import Problem
from hetflow.model.synthetic import random_cnn_graph
from hetflow.multi.problem import AppProblem, MultiProblem
from hetflow.multi.schedulability import AppSchedule, Task
from hetflow.multi.spec import AppSpec
from hetflow.platform.spec import ProcessingElement


def elements(n_cpu: int = 2, gpu: bool = True, power: bool = True) -> list[ProcessingElement]:
    els = [ProcessingElement(f"cpu{i}", "cpu", (i,), cluster="cpu",
                             power_w=2.0 if power else None) for i in range(n_cpu)]
    if gpu:
        els.append(ProcessingElement("gpu0", "gpu", (50,), device_index=0, model="gpu",
                                     power_w=20.0 if power else None))
    return els


def transfer(nbytes: int, src: str, dst: str) -> float:
    return 0.0 if src == dst else 20e-6 + nbytes * 1e-9


def app_problem(n_layers: int, seed: int, period: float, priority: int, els=None,
                name: str | None = None, layer_ms: float = 1.0, streams: int = 1,
                deadline: float | None = None) -> AppProblem:
    """A random CNN whose layers take about `layer_ms` on a CPU core and a quarter on the GPU."""
    els = els or elements()
    rng = np.random.default_rng(seed)
    graph = random_cnn_graph(n_layers, seed)
    work = rng.uniform(0.5, 1.5, len(graph.layers)) * layer_ms * 1e-3
    cols = [work if e.kind == "cpu" else work / 4 for e in els]
    problem = Problem(graph, els, np.column_stack(cols), transfer, call_overhead=50e-6)
    name = name or f"app{seed}"
    spec = AppSpec(f"{name}.onnx", period, priority, name, None, deadline, streams)
    return AppProblem(spec, graph, problem)


# firing time on k lanes over one lane, like an H100's batch-1 curve: 8 lanes run 8 frames in
# 2.4x one frame's time (3.3x the rate of one lane)
LANE_CURVE = {1: 1.0, 2: 1.15, 4: 1.5, 8: 2.4}


def with_lanes(app: AppProblem, curve: dict[int, float] | None = None) -> AppProblem:
    """`app` with a measured lane curve on gpu0."""
    app.problem.lane_slowdown["gpu0"] = dict(curve or LANE_CURVE)
    return app


# a firing of b frames over one of one frame, at each lane count: 8 frames in 3.2x the time
BATCH_CURVE = {1: 1.0, 2: 1.3, 4: 1.9, 8: 3.2}


def with_batches(app: AppProblem) -> AppProblem:
    """`app` with a measured batch table on gpu0 (the same curve at every lane count)."""
    app.problem.batch_slowdown["gpu0"] = {k: dict(BATCH_CURVE) for k in LANE_CURVE}
    return app


@pytest.fixture
def two_apps():
    els = elements()
    return MultiProblem([app_problem(6, 1, 0.050, 1, els), app_problem(8, 2, 0.080, 2, els)])


def chain(name: str, period: float, priority: int, tasks: list[tuple[str, float]],
          delays: list[float] | None = None) -> AppSchedule:
    """A chain of tasks (element, seconds) with optional delays between consecutive ones."""
    ts = [Task(f"{name}{i}", e, t) for i, (e, t) in enumerate(tasks)]
    delays = delays or [0.0] * (len(ts) - 1)
    return AppSchedule(name, period, priority, ts, [(i, i + 1, d) for i, d in enumerate(delays)])
