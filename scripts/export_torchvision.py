"""Export torchvision models (random weights) to ONNX as a user would: torch.onnx.export with
the TorchScript exporter, opset 17, batch 1. Usage: python scripts/export_torchvision.py DIR NAME...
(inception_v3 at 299x299, the others at 224x224)."""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torchvision


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[2:]:
        torch.manual_seed(0)
        kw = {"aux_logits": False, "init_weights": False} if name in ("inception_v3", "googlenet") else {}
        model = getattr(torchvision.models, name)(weights=None, **kw).eval()
        size = 299 if name == "inception_v3" else 224
        x = torch.randn(1, 3, size, size)
        path = out / f"{name}.onnx"
        torch.onnx.export(model, (x,), str(path), opset_version=17, dynamo=False,
                          input_names=["input"], output_names=["output"])
        print(f"exported {path} ({path.stat().st_size / 1e6:.1f} MB)", flush=True)


if __name__ == "__main__":
    main()
