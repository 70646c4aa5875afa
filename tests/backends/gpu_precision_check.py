"""Each GPU precision through the CUDA backend: outputs against the fp32 reference, frames/s.

Run on a CUDA machine (it skips, saying why, elsewhere):

    pytest tests/backends/gpu_precision_check.py -s -m gpu

For resnet18 and alexnet from the zoo, the whole model runs as one sub-network on gpu0 at fp32,
tf32, fp16 and bf16 (bf16 only where the device supports it) with one lane and a CUDA graph;
32 random frames are compared with ONNX Runtime's fp32 run on a CPU core by
`hetflow.model.accuracy`, and frames/s at one lane is measured and printed with them.
"""
import importlib.util
import json
import os
import time

import numpy as np
import pytest

from hetflow.backends import get_backend
from hetflow.backends.quantize import random_calibration
from hetflow.backends.torch_cuda import native_bf16
from hetflow.model import resolve_model
from hetflow.model.accuracy import Tolerance, compare_runs
from hetflow.model.subnet import extract_subnet
from hetflow.platform import ProcessingElement
from hetflow.platform.precision import element_name


def _why_not() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    if importlib.util.find_spec("onnx2torch") is None:
        return "onnx2torch is not installed"
    return None


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_why_not() is not None,
                                                  reason=f"needs CUDA: {_why_not()}")]

FRAMES = 32
# relative L2 per precision: fp32 only differs by kernel order; tf32 and fp16 keep 10 and 11
# mantissa bits, bf16 8; random-weight CNNs grow the rounding through their depth
TOLERANCE = {"fp32": Tolerance(rel_l2=1e-4), "tf32": Tolerance(rel_l2=2e-2, top1_flips=0.1),
             "fp16": Tolerance(rel_l2=2e-2, top1_flips=0.1),
             "bf16": Tolerance(rel_l2=1e-1, top1_flips=0.2)}


def gpu(precision: str) -> ProcessingElement:
    return ProcessingElement(element_name("gpu0", precision), "gpu", (0,), device_index=0,
                             precision=precision)


def frames_per_second(runner, feeds, seconds: float = 1.0) -> float:
    """One lane, one frame in flight: submit, collect, again, for about `seconds`."""
    for _ in range(10):
        runner.run(feeds)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        runner.submit(feeds)
        runner.collect()
        n += 1
    return n / (time.perf_counter() - t0)


@pytest.mark.parametrize("model", ["resnet18", "alexnet"])
def test_each_precision_runs_close_to_fp32_and_is_timed(model):
    import torch

    graph = resolve_model(model)
    sub = extract_subnet(graph, [layer.name for layer in graph.layers])
    frames = random_calibration(sub, frames=FRAMES, seed=5)
    core = sorted(os.sched_getaffinity(0))[0]
    cpu = ProcessingElement(f"cpu{core}", "cpu", (core,), cluster="cpu")
    reference_runner = get_backend("cpu").prepare(sub, cpu)
    reference = [reference_runner.run(f) for f in frames]
    precisions = ["fp32", "tf32", "fp16"] + (["bf16"] if native_bf16(torch) else [])
    rows, failed = [], []
    for precision in precisions:
        runner = get_backend("gpu").prepare(sub, gpu(precision))
        try:
            assert runner.mode == "cuda_graph", runner.fallback_reason
            got = [runner.run(f) for f in frames]
            assert all(o.dtype == np.float32 for g in got for o in g.values())
            report = compare_runs(got, reference, TOLERANCE[precision],
                                  f"{model} on {runner.element.name}")
            fps = frames_per_second(runner, frames[0])
        finally:
            runner.close()
        o = report.outputs[0]
        rows.append({"model": model, "precision": precision, "frames_per_s": round(fps, 1),
                     "rel_l2_median": o.rel_l2_median, "rel_l2_worst": o.rel_l2_worst,
                     "top1_agreement": o.top1_agreement, "passed": report.passed})
        if not report.passed:
            failed.append(report.to_dict())
    print(f"\n{torch.cuda.get_device_name(0)}, {model}, 1 lane, {FRAMES} frames:")
    for r in rows:
        print(json.dumps(r))
    assert not failed, failed
