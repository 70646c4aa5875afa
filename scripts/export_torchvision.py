"""Export torchvision CNNs (random weights) to ONNX as a user would: torch.onnx.export with the
TorchScript exporter, opset 17, batch 1 (inception_v3 at 299x299, the others at 224x224). The
files then go to `hetflow bench DIR/NAME.onnx`."""
from __future__ import annotations

import argparse
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python scripts/export_torchvision.py",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, metavar="DIR", help="where the NAME.onnx files go")
    ap.add_argument("names", nargs="+", metavar="NAME",
                    help="torchvision.models names, e.g. mobilenet_v3_large convnext_tiny")
    args = ap.parse_args(argv)
    import torch  # after the arguments: --help works without torch
    import torchvision

    unknown = [n for n in args.names if not callable(getattr(torchvision.models, n, None))]
    if unknown:
        ap.error(f"not a torchvision model: {', '.join(unknown)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        torch.manual_seed(0)
        kw = {"aux_logits": False, "init_weights": False} if name in ("inception_v3", "googlenet") else {}
        model = getattr(torchvision.models, name)(weights=None, **kw).eval()
        size = 299 if name == "inception_v3" else 224
        path = args.out / f"{name}.onnx"
        torch.onnx.export(model, (torch.randn(1, 3, size, size),), str(path), opset_version=17,
                          dynamo=False, input_names=["input"], output_names=["output"])
        print(f"exported {path} ({path.stat().st_size / 1e6:.1f} MB)", flush=True)


if __name__ == "__main__":
    main()
