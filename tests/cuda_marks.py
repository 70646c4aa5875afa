"""The marks of tests that need a CUDA GPU: `gpu`, and a skip naming what is missing elsewhere."""
import importlib.util

import pytest


def cuda_ready() -> bool:
    """torch and onnx2torch are installed and torch sees a CUDA device."""
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("onnx2torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


NEEDS_CUDA = [pytest.mark.gpu,
              pytest.mark.skipif(not cuda_ready(), reason="needs a CUDA GPU with torch and onnx2torch")]
