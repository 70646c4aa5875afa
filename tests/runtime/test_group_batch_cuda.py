"""The practitioner's batched design run by hetflow's engine, on a CUDA GPU (skipped elsewhere):
the whole model on a group of the GPU at (b, k) and a single-thread copy on every other core,
frames dispatched dynamically (a GPU lane takes blocks of b consecutive frames) and released in
order, against the same design run as independent copies (the bench's parallel baseline, no
order kept). Outputs are checked; both rates are printed (run with -s):
    pytest tests/runtime/test_group_batch_cuda.py -s -m gpu
"""
import os

import pytest

from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.model import resolve_model
from hetflow.plan.mapping import Mapping, group_name
from hetflow.plan.plan import Plan
from hetflow.platform.spec import ProcessingElement
from hetflow.runtime.api import run_plan
from hetflow.runtime.baselines import measure_parallel
from hetflow.runtime.inputs import random_source
from tests.cuda_marks import NEEDS_CUDA


pytestmark = NEEDS_CUDA

SECONDS = 3.0
CORES = sorted(os.sched_getaffinity(0))


@pytest.mark.parametrize("model, lanes, batch", [("alexnet", 4, 16), ("resnet18", 4, 32)])
def test_the_batched_gpu_beside_cpu_copies_runs_as_the_independent_copies_do(model, lanes,
                                                                            batch):
    if len(CORES) < 3:
        pytest.skip("needs a GPU's driving core and at least two cores for copies")
    graph = resolve_model(model)
    gpu = ProcessingElement("gpu0", "gpu", (CORES[0],), device_index=0)
    cpus = [ProcessingElement(f"cpu{c}", "cpu", (c,), cluster="cpu") for c in CORES[1:]]
    members = [*cpus, gpu]
    source = random_source(graph)
    copies = measure_parallel(graph, members, source, warmup=5, seconds=SECONDS,
                              lanes={"gpu0": lanes}, batch={"gpu0": batch})
    actor = group_name([e.name for e in members])
    assignment = {l.name: actor for l in graph.layers}
    mapping = Mapping(assignment, "maximal", lanes={"gpu0": lanes}, batch={"gpu0": batch})
    plan = Plan(graph.name, graph.model_hash, "", "gpu test", mapping,
                cnn_to_csdf(graph, assignment, "maximal"), {e.name: e for e in members}, 2,
                {"throughput": copies.throughput}, "test")
    frames = int(copies.throughput * SECONDS)
    run = run_plan(plan, graph, frames, frames // 10, check="first")
    print(f"\n{model}: gpu0 x{lanes} b{batch} beside {len(cpus)} copies: independent copies "
          f"{copies.throughput:.0f} frames/s (gpu {copies.notes['per_element_fps']['gpu0']:.0f}),"
          f" hetflow's group {run.throughput:.0f} (gpu "
          f"{run.notes['per_element_fps'].get('gpu0', 0.0):.0f}), p99 {run.latency['p99'] * 1e3:.1f}"
          f" ms against {copies.latency['p99'] * 1e3:.1f}")
    assert run.checked_frames > 0
    assert run.throughput >= 0.85 * copies.throughput
