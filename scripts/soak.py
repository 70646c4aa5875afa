"""Soak: stream many frames through one plan in one run, sampling every few seconds the
frames done, the process's resident memory (RSS), its open file descriptors and the GPU memory
in use, and fail (exit 1) if the run slowed down or grew:

- the rate of the last window (--window seconds, several samples) is below RATE_FLOOR (0.97)
  x the first window's after the warm-up;
- RSS or device memory at the end is more than GROWTH (5%) above the first sample after the
  warm-up; or the open descriptors grew by more than max(2, 5%).

The curve is written as JSON (--out) and printed as a table. PLAN is a plan file from
`hetflow map`, or a model (zoo name or ONNX file), which is then split in two halves over the
first two cores of this machine (the whole model on one core where there is one).

    python scripts/soak.py squeezenet1_0 --frames 3000 --every 5 --out soak.json
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

RATE_FLOOR = 0.97
GROWTH = 0.05


def two_core_plan(model: str):
    """The model's layers in two halves on the first two usable cores (one core: one stage)."""
    from hetflow.dataflow.csdf import cnn_to_csdf
    from hetflow.plan.mapping import Mapping
    from hetflow.plan.plan import Plan
    from hetflow.model import resolve_model
    from hetflow.platform.spec import ProcessingElement

    graph = resolve_model(model, fuse=True)
    cores = sorted(os.sched_getaffinity(0))[:2]
    names = [layer.name for layer in graph.layers]
    el = [f"cpu{c}" for c in cores]
    assignment = {n: el[min(i * len(el) // len(names), len(el) - 1)] for i, n in enumerate(names)}
    elements = {e: ProcessingElement(e, "cpu", (c,)) for e, c in zip(el, cores)}
    plan = Plan(graph.name, graph.model_hash, model, "soak", Mapping(assignment, "maximal"),
                cnn_to_csdf(graph, assignment, "maximal"), elements, 2, {}, "soak", fuse=True)
    return plan, graph


def device_memory_mb(gpu: bool) -> float | None:
    """MB in use on GPU 0 (by every process: ONNX Runtime's CUDA memory is not PyTorch's
    allocator's), or None without a GPU in the plan."""
    if not gpu:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2 ** 20


class Sampler:
    """Samples (seconds, frames, RSS MB, fds, device MB) every `every` seconds from a thread,
    until the last of `total` frames is out (what runs after, the check of the outputs
    against a reference session, is not the run's)."""

    def __init__(self, every: float, gpu: bool, total: int) -> None:
        import psutil

        self.proc, self.every, self.gpu, self.total = psutil.Process(), every, gpu, total
        self.frames = 0
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)
        self.t0 = time.perf_counter()

    def on_frame(self, f: int) -> None:  # the engine's thread, once per frame in order
        self.frames = f + 1
        if self.frames >= self.total:
            self._stop.set()

    def sample(self) -> None:
        t, n = time.perf_counter() - self.t0, self.frames
        last = self.samples[-1] if self.samples else None
        fps = ((n - last["frames"]) / (t - last["t_s"])
               if last is not None and t > last["t_s"] else None)
        self.samples.append({"t_s": round(t, 3), "frames": n, "fps": fps,
                             "rss_mb": self.proc.memory_info().rss / 2 ** 20,
                             "fds": self.proc.num_fds(),
                             "device_mb": device_memory_mb(self.gpu)})

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()
            s = self.samples[-1]  # long work shows progress: one line a sample
            print(f"  {s['t_s']:7.1f} s  {s['frames']:>9,} frames  {s['fps'] or 0:9.1f} frames/s  "
                  f"RSS {s['rss_mb']:.0f} MB", file=sys.stderr, flush=True)

    def __enter__(self) -> "Sampler":
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def window_rate(a: dict, b: dict) -> dict:
    """The window from sample `a` to sample `b`: its seconds and frames/s."""
    return {"from_s": a["t_s"], "to_s": b["t_s"],
            "fps": (b["frames"] - a["frames"]) / (b["t_s"] - a["t_s"])}


def verdict(samples: list[dict], warmup_s: float, window_s: float) -> dict:
    """The checks, from the samples after `warmup_s`: the rate of the first `window_s`
    seconds against the last's (a window of several samples: one sample's rate on a shared
    machine moves by 10-20%), and the memory and descriptors of the first sample against the
    last's."""
    steady = [s for s in samples if s["t_s"] >= warmup_s and s["fps"] is not None]
    start = steady[0] if steady else None
    first_end = next((s for s in steady if start and s["t_s"] >= start["t_s"] + window_s), None)
    end = steady[-1] if steady else None
    last_start = next((s for s in reversed(steady) if s["t_s"] <= end["t_s"] - window_s), None)
    if first_end is None or last_start is None or last_start["t_s"] < first_end["t_s"]:
        return {"ok": False, "why": [f"the run is too short for two {window_s:g} s windows "
                                     f"after the {warmup_s:g} s warm-up: run more frames or "
                                     "give a shorter --window"]}
    first, last = window_rate(start, first_end), window_rate(last_start, end)
    why = []
    ratio = last["fps"] / first["fps"] if first["fps"] else None
    if ratio is None or ratio < RATE_FLOOR:
        why.append(f"rate fell: last window {last['fps']:.1f} frames/s, first after the warm-up "
                   f"{first['fps']:.1f} ({ratio if ratio is not None else 0:.3f}x < "
                   f"{RATE_FLOOR})")
    growth = {}
    for key in ("rss_mb", "device_mb"):
        if start[key] is not None and end[key] is not None:
            growth[key] = end[key] / start[key] - 1.0
            if growth[key] > GROWTH:
                why.append(f"{key} grew {growth[key]:.1%} ({start[key]:.1f} -> "
                           f"{end[key]:.1f})")
    fds = end["fds"] - start["fds"]
    if fds > max(2, GROWTH * start["fds"]):
        why.append(f"open descriptors grew by {fds} ({start['fds']} -> {end['fds']})")
    return {"ok": not why, "why": why, "rate_ratio": ratio, "growth": growth, "fds_growth": fds,
            "first_window": first, "last_window": last}


def table(samples: list[dict]) -> str:
    rows = [f"{'t s':>8} {'frames':>8} {'frames/s':>9} {'RSS MB':>8} {'fds':>5} {'GPU MB':>8}"]
    for s in samples:
        rows.append(f"{s['t_s']:8.1f} {s['frames']:8d} "
                    f"{s['fps'] if s['fps'] is not None else float('nan'):9.1f} "
                    f"{s['rss_mb']:8.1f} {s['fds']:5d} "
                    + (f"{s['device_mb']:8.1f}" if s["device_mb"] is not None else f"{'-':>8}"))
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("plan", metavar="PLAN", help="plan JSON from hetflow map, or a model (zoo "
                                                 "name or ONNX file)")
    ap.add_argument("--frames", type=int, default=100_000, help="frames in the one run")
    ap.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=None, metavar="SECONDS",
                    help="seconds before the first window compared (default: 2 samples)")
    ap.add_argument("--window", type=float, default=None, metavar="SECONDS",
                    help="length of the first and last windows compared (default: 4 samples)")
    ap.add_argument("--out", type=Path, default=None, help="write the curve here as JSON")
    a = ap.parse_args(argv)
    if a.frames < 2 or a.every <= 0:
        print("soak: --frames must be at least 2 and --every positive", file=sys.stderr)
        return 2

    from hetflow.errors import HetflowError
    from hetflow.io import write_json
    from hetflow.plan.plan import Plan
    from hetflow.runtime.api import load_plan_model, run_plan

    try:
        if a.plan.endswith(".json"):
            plan = Plan.load(a.plan)
            graph = load_plan_model(plan)
        else:
            plan, graph = two_core_plan(a.plan)
    except HetflowError as e:
        print(f"soak: error: {e}", file=sys.stderr)
        return 2
    gpu = any(e.kind == "gpu" for e in plan.elements.values())
    warmup_s = a.warmup if a.warmup is not None else 2 * a.every
    window_s = a.window if a.window is not None else 4 * a.every
    print(f"soak: {a.frames} frames of {graph.name} on {', '.join(plan.elements)}, a sample "
          f"every {a.every:g} s", file=sys.stderr, flush=True)
    with Sampler(a.every, gpu, a.frames) as s:
        report = run_plan(plan, graph, a.frames, warmup=min(50, a.frames // 4), check="first",
                          on_frame=s.on_frame)
    result = {"command": "python scripts/soak.py " + " ".join(argv or sys.argv[1:]),
              "model": graph.name, "elements": list(plan.elements), "frames": report.frames,
              "complete": report.complete, "throughput": report.throughput,
              "latency": report.latency, "checked_frames": report.checked_frames,
              "warmup_s": warmup_s, "window_s": window_s, "samples": s.samples,
              **verdict(s.samples, warmup_s, window_s)}
    print(table(s.samples))
    print(f"run: {report.throughput:.1f} frames/s over {report.frames} frames"
          + ("" if report.complete else " (interrupted)"))
    if result.get("rate_ratio") is not None:
        g = result["growth"]
        print(f"last/first window {result['rate_ratio']:.3f}x; RSS "
              f"{g.get('rss_mb', 0):+.1%}" + (f", GPU {g['device_mb']:+.1%}"
                                             if "device_mb" in g else "")
              + f"; fds {result['fds_growth']:+d}")
    print("PASS" if result["ok"] else "FAIL: " + "; ".join(result["why"]))
    if a.out:
        write_json(a.out, result)
        print(f"wrote {a.out}")
    if not report.complete:
        return 130
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
