"""Device check of the torch_cuda backend on the nine CNNs of the H200 anchors (needs a CUDA GPU,
torch, torchvision, onnxruntime and onnx2torch).

For each zoo model, in one process:
- whole-model outputs of our backend (CUDA graph) against ONNX Runtime on the CPU with graph
  optimisation off (ORT's optimised graph is wrong for tiny_yolo_v2: it folds Pad(0) into
  MaxPool; the `ort_opt_err` column shows by how much);
- our backend's whole-model throughput (`whole_model_cuda_graph_fps`) next to the CUDA-graph
  throughput of the same architecture built with torchvision as shared/anchors/anchor_bench.py
  builds and captures it, timed the same ways as ours (one frame at a time; back to back) and
  as anchor_bench.py times it (see `torchvision_graph_timings` for why that differs).

Prints two tables and writes $OUT/gpu_backend_check.json (OUT defaults to ./out).

    python scripts/gpu_backend_check.py [--seconds 2] [model ...]
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hetflow.backends.torch_cuda import TorchCudaBackend, configure_torch  # noqa: E402
from hetflow.bench.gpu_backend import (back_to_back_fps, timed_loop,  # noqa: E402
                                       whole_model_cuda_graph_fps)
from hetflow.model import zoo  # noqa: E402
from hetflow.model.subnet import Subnet  # noqa: E402
from hetflow.platform.spec import ProcessingElement  # noqa: E402

MODELS = ["alexnet", "vgg19", "googlenet", "tiny_yolo_v2", "resnet18", "densenet121",
          "emotion_ferplus", "mobilenet_v2", "squeezenet1_0"]
RTOL, ATOL = 1e-3, 1e-4
GPU = ProcessingElement(name="gpu0", kind="gpu", cores=(0,), device_index=0)


# ---- the anchors' PyTorch models (as anchor_bench.py builds them) -------------------------

def tiny_yolo_v2():
    from torch import nn

    layers, c = [], 3
    for i, n in enumerate([16, 32, 64, 128, 256, 512]):
        layers += [nn.Conv2d(c, n, 3, padding=1, bias=False), nn.BatchNorm2d(n), nn.LeakyReLU(0.1)]
        layers += ([nn.MaxPool2d(2, 2)] if i < 5
                   else [nn.ZeroPad2d((0, 1, 0, 1)), nn.MaxPool2d(2, 1)])
        c = n
    layers += [nn.Conv2d(512, 1024, 3, padding=1, bias=False), nn.BatchNorm2d(1024),
               nn.LeakyReLU(0.1), nn.Conv2d(1024, 1024, 3, padding=1, bias=False),
               nn.BatchNorm2d(1024), nn.LeakyReLU(0.1), nn.Conv2d(1024, 125, 1)]
    return nn.Sequential(*layers)


def fer_plus():
    from torch import nn

    layers, c = [], 1
    for v in [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 256, 256, 256, "M"]:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU()]
            c = v
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(256 * 4 * 4, 1024), nn.ReLU(),
                         nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 8))


def torch_model(name: str):
    import torchvision.models as tvm

    return {
        "alexnet": tvm.alexnet, "vgg19": tvm.vgg19, "resnet18": tvm.resnet18,
        "googlenet": lambda: tvm.googlenet(aux_logits=False, init_weights=True),
        "tiny_yolo_v2": tiny_yolo_v2, "densenet121": tvm.densenet121,
        "emotion_ferplus": fer_plus, "mobilenet_v2": tvm.mobilenet_v2,
        "squeezenet1_0": tvm.squeezenet1_0,
    }[name]()


def torchvision_graph_timings(name: str, shape: tuple[int, ...], seconds: float) -> dict:
    """The torchvision model captured as anchor_bench.py's gpu_graph_fn does (3 warm-ups on a
    side stream, one forward captured on it), then timed three ways:

    - `anchor`: anchor_bench's loop as written: `graph.replay(); stream.synchronize()`. The
      replay goes to the current (default) stream while the sync waits on the capture stream,
      so nothing waits for the GPU; `anchor_tail_s` is how long the work still queued when
      the loop's clock stopped took to finish;
    - `synced`: the replay on the capture stream, then its sync: one frame at a time, which is
      what our `graph_fps` measures;
    - `async`: replays back to back on the capture stream, one sync at the end (as our
      `graph_async_fps`).
    """
    import torch

    torch.manual_seed(0)
    model = torch_model(name).eval().cuda()
    with torch.inference_mode():
        x = torch.randn(shape, device="cuda")
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(3):
                model(x)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            model(x)

        def anchor_replay():
            graph.replay()
            stream.synchronize()

        def launch():
            with torch.cuda.stream(stream):
                graph.replay()

        def synced_replay():
            launch()
            stream.synchronize()

        r = {}
        r["anchor_fps"], r["anchor_ms"] = timed_loop(anchor_replay, seconds)
        t0 = time.perf_counter()
        torch.cuda.synchronize()
        r["anchor_tail_s"] = time.perf_counter() - t0
        r["synced_fps"], r["synced_ms"] = timed_loop(synced_replay, seconds)
        r["async_fps"] = back_to_back_fps(launch, stream.synchronize, seconds)
    return r


# ---- one model ----------------------------------------------------------------------------

def ort_output(model: onnx.ModelProto, feeds: dict, optimise: bool) -> np.ndarray:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimise
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def check_model(name: str, seconds: float) -> dict:
    import torch

    model = onnx.load(str(zoo.cached_model_path(name)))
    g = model.graph
    (inp,), (out,) = g.input, g.output
    shape = tuple(d.dim_value for d in inp.type.tensor_type.shape.dim)
    feeds = {inp.name: np.random.default_rng(0).standard_normal(shape, dtype=np.float32)}
    ref = ort_output(model, feeds, optimise=False)
    ref_opt = ort_output(model, feeds, optimise=True)

    t0 = time.perf_counter()
    sub = Subnet(name, tuple(n.name for n in g.node), model, [inp.name], [out.name])
    runner = TorchCudaBackend().prepare(sub, GPU, cuda_graph=True)
    prepare_s = time.perf_counter() - t0
    try:
        got = runner.run(feeds)[out.name]
        mode = runner.mode
    finally:
        runner.close()
    torch.cuda.empty_cache()
    scale = max(1.0, float(np.abs(ref).max()))
    ours = whole_model_cuda_graph_fps(model, seconds)
    torch.cuda.empty_cache()
    tv = torchvision_graph_timings(name, shape, seconds)
    torch.cuda.empty_cache()
    return {
        "model": name, "mode": mode, "prepare_s": prepare_s,
        "max_abs_ref": float(np.abs(ref).max()),
        "max_abs_err": float(np.abs(got - ref).max()),
        "allclose": bool(np.allclose(got, ref, rtol=RTOL, atol=ATOL)),
        "allclose_scaled": bool(np.allclose(got / scale, ref / scale, rtol=RTOL, atol=ATOL)),
        "ort_opt_err": float(np.abs(ref_opt - ref).max()),
        "ours_graph_fps": ours["graph_fps"], "ours_graph_ms": ours["graph_ms"],
        "ours_run_fps": ours["run_fps"], "ours_run_ms": ours["run_ms"],
        "ours_async_fps": ours["graph_async_fps"],
        **{f"tv_{k}": v for k, v in tv.items()},
        "graph_vs_synced": ours["graph_fps"] / tv["synced_fps"],
        "async_vs_async": ours["graph_async_fps"] / tv["async_fps"],
        "graph_vs_anchor": ours["graph_fps"] / tv["anchor_fps"],
    }


def _row(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def tables(rows: list[dict]) -> str:
    """Correctness, then throughput (fps; ms are median latencies)."""
    ok = [r for r in rows if "error" not in r]
    out = [_row(["model", "mode", "max abs err", "max abs ref", "allclose", "allclose scaled",
                 "ORT optimised vs not"]), _row(["---"] * 7)]
    out += [_row([r["model"], r["mode"], f"{r['max_abs_err']:.3g}", f"{r['max_abs_ref']:.3g}",
                  "yes" if r["allclose"] else "NO", "yes" if r["allclose_scaled"] else "NO",
                  f"{r['ort_opt_err']:.3g}"]) for r in ok]
    out += ["", _row(["model", "ours graph fps (ms)", "tv synced fps (ms)", "ours/tv synced",
                      "ours run() fps (ms)", "ours async fps", "tv async fps", "ours/tv async",
                      "tv anchor-way fps (ms)", "anchor tail s"]), _row(["---"] * 10)]
    out += [_row([r["model"], f"{r['ours_graph_fps']:.0f} ({r['ours_graph_ms']:.3f})",
                  f"{r['tv_synced_fps']:.0f} ({r['tv_synced_ms']:.3f})",
                  f"{r['graph_vs_synced']:.3f}",
                  f"{r['ours_run_fps']:.0f} ({r['ours_run_ms']:.3f})",
                  f"{r['ours_async_fps']:.0f}", f"{r['tv_async_fps']:.0f}",
                  f"{r['async_vs_async']:.3f}",
                  f"{r['tv_anchor_fps']:.0f} ({r['tv_anchor_ms']:.3f})",
                  f"{r['tv_anchor_tail_s']:.3f}"]) for r in ok]
    out += [f"{r['model']}: error: {r['error']}" for r in rows if "error" in r]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--seconds", type=float, default=2.0, help="timing per measurement")
    args = ap.parse_args(argv)
    ok, why = TorchCudaBackend.available()
    if not ok:
        print(f"gpu_backend_check: {why}", file=sys.stderr)
        return 2
    import onnxruntime
    import torch

    configure_torch()
    info = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__,
            "onnx2torch": importlib.metadata.version("onnx2torch"),
            "python": platform.python_version(),
            "cpus": os.cpu_count(), "seconds": args.seconds, "rtol": RTOL, "atol": ATOL}
    print(json.dumps(info), flush=True)
    rows = []
    for name in args.models:
        try:
            row = check_model(name, args.seconds)
        except Exception as e:  # report and go on: one model must not hide the others
            row = {"model": name, "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
        rows.append(row)
        print(json.dumps({k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()}),
              flush=True)
    out_dir = Path(os.environ.get("OUT", "out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gpu_backend_check.json").write_text(json.dumps({"info": info, "rows": rows},
                                                               indent=1))
    print(tables(rows))
    return 0 if all("error" not in r and r["allclose_scaled"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
