"""An outside reference: the same CNN behind NVIDIA Triton's own dynamic batcher and instance
groups (through PyTriton), fed frames on a clock, measured as `hetflow run PLAN --rate R`
measures a plan: frames/s delivered, and each frame's latency from its nominal arrival (p50,
p99), outputs checked against ONNX Runtime running the model alone.

Each instance runs ONNX Runtime on the CPU (`--threads` each) with a session of the model at
every batch from 1 to `--max-batch` (hetflow's `batched_model`), so a batch of n frames runs
n frames, as a model with a dynamic batch dimension does in Triton (hetflow's own batched
runners pad a partial batch). A GPU would need Triton's ONNX Runtime or TensorRT backend,
which PyTriton does not bundle.

PyTriton pins numpy below 2, so it gets an environment of its own, with hetflow (numpy 1.24 or
later) beside it; its Python backend's stub needs the interpreter's libpython:

    python3.12 -m venv /tmp/tv && /tmp/tv/bin/pip install nvidia-pytriton onnxruntime -e .
    LD_LIBRARY_PATH=$(python3.12 -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))') \\
      /tmp/tv/bin/python scripts/triton_reference.py squeezenet1_0 --rate 100 --instances 2
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

CHECKED = 8  # frames whose outputs are compared with ONNX Runtime alone


def session(model, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def whole_model(name: str, batches: int):
    """(the model at each batch from 1 to `batches`, its input's per-frame shape, its
    output's), from a zoo name or ONNX file as hetflow reads it."""
    from hetflow.backends.batching import batched_model
    from hetflow.model import resolve_model
    from hetflow.model.subnet import extract_subnet

    graph = resolve_model(name)
    whole = extract_subnet(graph, [l.name for l in graph.layers], "whole")
    (inp,), (out,) = whole.model.graph.input[:1], whole.model.graph.output[:1]
    dims = [[d.dim_value for d in v.type.tensor_type.shape.dim][1:] for v in (inp, out)]
    return {b: batched_model(whole, b) for b in range(1, batches + 1)}, dims[0], dims[1]


def serve(triton, models: dict, shape, out_shape, args) -> None:
    """Bind the model: `--instances` functions, each with its own sessions (Triton's instance
    group), dynamic batches of up to `--max-batch` frames waiting at most `--queue-delay-ms`."""
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor

    name = models[1].graph.input[0].name

    def instance():
        sessions = {b: session(m, args.threads) for b, m in models.items()}

        @batch
        def infer(x):
            return {"y": sessions[len(x)].run(None, {name: x})[0]}
        return infer

    triton.bind("model", [instance() for _ in range(args.instances)],
                inputs=[Tensor(name="x", dtype=np.float32, shape=tuple(shape))],
                outputs=[Tensor(name="y", dtype=np.float32, shape=tuple(out_shape))],
                config=ModelConfig(max_batch_size=args.max_batch, batcher=DynamicBatcher(
                    max_queue_delay_microseconds=int(args.queue_delay_ms * 1000))),
                strict=False)


def on_a_clock(url: str, frames: np.ndarray, rate: float, workers: int) -> tuple[list, list]:
    """Send frame i at i / rate s from the start (open loop: a late answer delays no later
    frame); each frame's latency from its nominal arrival, and its output."""
    from pytriton.client import FuturesModelClient

    n = len(frames)
    latency, outputs = [None] * n, [None] * n
    with FuturesModelClient(url, "model", max_workers=workers) as client:
        t0 = time.perf_counter() + 0.05
        pending = []
        for i in range(n):
            due = t0 + i / rate
            while (now := time.perf_counter()) < due:
                time.sleep(min(due - now, 0.001))
            fut = client.infer_sample(x=frames[i])

            def done(f, i=i, due=due):
                outputs[i] = f.result()["y"]
                latency[i] = time.perf_counter() - due
            fut.add_done_callback(done)
            pending.append(fut)
        for fut in pending:
            fut.result()
        end = time.perf_counter()
    while any(x is None for x in latency):  # callbacks may trail the futures a little
        time.sleep(0.001)
    return latency, outputs, end - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="zoo name or ONNX file")
    ap.add_argument("--rate", type=float, required=True, help="frames/s arriving on a clock")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds left out at the start")
    ap.add_argument("--instances", type=int, default=1, help="the model's instance count")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads an instance")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--queue-delay-ms", type=float, default=2.0)
    ap.add_argument("--workers", type=int, default=64, help="client requests in flight at most")
    ap.add_argument("--port", type=int, default=18000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.rate <= 0 or args.seconds <= 0 or args.instances < 1 or args.max_batch < 1:
        print("--rate, --seconds, --instances and --max-batch must be positive", file=sys.stderr)
        return 2
    from pytriton.triton import Triton, TritonConfig

    n = int(args.rate * (args.seconds + args.warmup))
    skip = int(args.rate * args.warmup)
    models, shape, out_shape = whole_model(args.model, args.max_batch)
    with Triton(config=TritonConfig(http_port=args.port, grpc_port=args.port + 1,
                                    metrics_port=args.port + 2)) as triton:
        serve(triton, models, shape, out_shape, args)
        triton.run()
        rng = np.random.default_rng(0)
        frames = rng.random((min(n, 64), *shape), dtype=np.float32)
        stream = frames[np.arange(n) % len(frames)]
        latency, outputs, wall = on_a_clock(f"localhost:{args.port}", stream, args.rate,
                                            args.workers)
    alone, name = session(models[1], 1), models[1].graph.input[0].name
    errors = [float(np.max(np.abs(np.asarray(outputs[i]).ravel() - np.ravel(
        alone.run(None, {name: stream[i:i + 1]})[0])))) for i in range(skip, skip + CHECKED)]
    lat = np.array(latency[skip:]) * 1e3
    row = {"model": args.model, "server": f"Triton (PyTriton), {args.instances} instances x "
           f"{args.threads} threads, dynamic batch {args.max_batch}, queue delay "
           f"{args.queue_delay_ms:g} ms", "rate": args.rate, "frames": n - skip,
           "frames_per_s": n / wall, "p50_ms": float(np.percentile(lat, 50)),
           "p99_ms": float(np.percentile(lat, 99)), "max_abs_error": max(errors),
           "checked_frames": CHECKED}
    if args.json:
        print(json.dumps(row))
    else:
        print(f"{row['server']}: {row['frames']} frames at {args.rate:g}/s: "
              f"{row['frames_per_s']:.1f} frames/s, p50 {row['p50_ms']:.2f} ms, p99 "
              f"{row['p99_ms']:.2f} ms; {CHECKED} frames checked, max abs error "
              f"{row['max_abs_error']:.2g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
