"""Backends and the platform agree on precisions; the CUDA backend's TF32 scope (no GPU needed)."""
import importlib.util

import pytest

from hetflow.backends.ort_cpu import OrtCpuBackend
from hetflow.backends.torch_cuda import TorchCudaBackend, tf32_math
from hetflow.platform import PRECISIONS_OF_KIND


def test_the_default_backends_run_every_precision_the_platform_allows_their_kind():
    assert set(OrtCpuBackend.precisions) == set(PRECISIONS_OF_KIND["cpu"])
    assert set(TorchCudaBackend.precisions) == set(PRECISIONS_OF_KIND["gpu"])


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
@pytest.mark.parametrize("before", [False, True])
def test_tf32_is_set_only_inside_the_scope_and_set_back_after_an_error(before):
    import torch

    flags = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = [f.allow_tf32 for f in flags]
    try:
        for f in flags:
            f.allow_tf32 = before
        for on in (True, False):
            with pytest.raises(KeyError), tf32_math(torch, on):
                assert [f.allow_tf32 for f in flags] == [on, on]
                raise KeyError
            assert [f.allow_tf32 for f in flags] == [before, before]
    finally:
        for f, v in zip(flags, saved):
            f.allow_tf32 = v
