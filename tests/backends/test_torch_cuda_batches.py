"""torch_cuda at batch b on k lanes (needs a CUDA GPU; skipped elsewhere): each frame's outputs
equal the fp32 CPU reference's, full and partial batches, and the frames/s of k lanes of b
frames are printed (run with -s) so that t(b, k) can be read off on the GPU machine:
    pytest tests/backends/test_torch_cuda_batches.py -s -m gpu
"""
import time

import numpy as np
import pytest

from hetflow.backends import get_backend
from hetflow.backends.inflight import InFlight
from hetflow.model import resolve_model
from hetflow.model.subnet import extract_subnet
from hetflow.platform.spec import ProcessingElement
from tests.cuda_marks import NEEDS_CUDA


pytestmark = NEEDS_CUDA

GPU = ProcessingElement(name="gpu0", kind="gpu", cores=(0,), device_index=0)
CPU = ProcessingElement(name="cpu0", kind="cpu", cores=(0,), cluster="cpu")
RTOL, ATOL = 1e-3, 1e-4  # as tests/backends/test_torch_cuda.py, on tensors scaled to <= 1
BATCHES, LANES, SECONDS = (1, 8, 32), (1, 8), 1.0


def assert_close(got, want, what):
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got / scale, want / scale, rtol=RTOL, atol=ATOL, err_msg=what)


@pytest.fixture(scope="module", params=["resnet18", "alexnet"])
def model(request):
    """(name, whole-model sub-network, 32 frames, their fp32 CPU reference outputs)."""
    graph = resolve_model(request.param)
    sub = extract_subnet(graph, [l.name for l in graph.layers])
    rng = np.random.default_rng(0)
    frames = [{n: rng.standard_normal(graph.tensors[n].shape, dtype=np.float32)
               for n in sub.inputs} for _ in range(max(BATCHES))]
    ref = get_backend("cpu").prepare(sub, CPU, optimization="disable")
    return request.param, sub, frames, [ref.run(f) for f in frames]


def frames_per_second(lanes: list, frames: list, seconds: float) -> float:
    """k lanes kept busy by one thread, each firing `frames` (a full batch)."""
    runs, fired = InFlight(lanes), 0
    for r in lanes:
        r.run_frames(frames)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        while runs.has_room():
            runs.submit_frames(frames)
        runs.collect()
        fired += 1
    while len(runs):
        runs.collect()
        fired += 1
    return fired * len(frames) / (time.perf_counter() - t0)


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("lanes", LANES)
def test_batched_lanes_match_the_cpu_reference(model, batch, lanes):
    name, sub, frames, want = model
    runners = get_backend("gpu").prepare_lanes(sub, GPU, lanes, batch=batch)
    try:
        assert all(r.batch == batch and r.mode == "cuda_graph" for r in runners)
        partial = max(1, batch // 2)
        for r, n in ((runners[0], batch), (runners[-1], partial)):
            got = r.run_frames(frames[:n])
            assert len(got) == n
            for i, out in enumerate(got):
                for t in sub.outputs:
                    assert out[t].shape[0] == 1
                    assert_close(out[t], want[i][t], f"{name} b{batch} x{lanes} frame {i} {t}")
        fps = frames_per_second(runners, frames[:batch], SECONDS)
        print(f"\n{name} x{lanes} b{batch}: {fps:,.0f} frames/s, "
              f"firing {lanes * batch / fps * 1e3:.3f} ms, "
              f"memory {runners[0].memory_bytes / 2**20:,.0f} MiB at build")
        assert fps > 0
    finally:
        for r in runners:
            r.close()


def test_batches_staged_on_the_elements_other_cores_match_the_cpu_reference(model):
    """A GPU element with a staging core: its lanes stage each batch on two threads
    (backends.staging), and every frame still equals the reference, full and partial."""
    name, sub, frames, want = model
    staged = ProcessingElement(name="gpu0", kind="gpu", cores=(0, 1), device_index=0)
    runners = get_backend("gpu").prepare_lanes(sub, staged, 2, batch=8)
    try:
        assert all(r._stager is not None for r in runners)
        for r, n in ((runners[0], 8), (runners[1], 5)):
            got = r.run_frames(frames[:n])
            for i, out in enumerate(got):
                for t in sub.outputs:
                    assert_close(out[t], want[i][t], f"{name} staged b8 frame {i} {t}")
        print(f"\n{name} x2 b8, staged on 2 cores: "
              f"{frames_per_second(runners, frames[:8], SECONDS):,.0f} frames/s")
    finally:
        for r in runners:
            r.close()
