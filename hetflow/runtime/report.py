"""What a run measured, as a plain object: printed as a table, written as JSON."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


def latency_stats(lat: list[float] | np.ndarray) -> dict[str, float]:
    a = np.asarray(lat, dtype=float)
    if a.size == 0:
        return {"p50": float("nan"), "p90": float("nan"), "p99": float("nan"), "max": float("nan")}
    return {"p50": float(np.percentile(a, 50)), "p90": float(np.percentile(a, 90)),
            "p99": float(np.percentile(a, 99)), "max": float(a.max()), "mean": float(a.mean())}


def steady_throughput(done_at: list[float], warmup: int, drain: int = 0,
                      completed_at: list[float] | None = None, last_entry: float | None = None
                      ) -> tuple[float, float, int]:
    """Frames per second of the stream once frame `warmup` was released, as (throughput, window
    seconds, warm-up frames actually excluded); NaN with too few frames.

    With `completed_at` (when each frame's last firing ended) and `last_entry` (when the last
    frame entered), the window ends as the last frame enters and counts the frames completed
    inside it: after that no frame enters and the elements run dry one by one, a tail a stream
    never has. In-order release makes that tail as long as a slow member's frame: a data-parallel
    plan of vgg19 with 3-core members beside a GPU (100-300 ms a frame there, 1.5 ms a frame
    on the GPU) measured 12% below its own pilot in a one-second run. Where the frames entered
    too early for such a window (a short run), the window ends at the last release but `drain`
    (an element that runs frames interleaved finishes its last `drain` frames in a burst once
    no new frame enters: they would count a rate the stream never has)."""
    n = len(done_at)
    w = min(warmup, max(n - 2, 0))
    if completed_at is not None and last_entry is not None and n - w >= 2:
        t0 = done_at[w]
        window = last_entry - t0
        inside = sum(1 for c in completed_at if t0 < c <= last_entry)
        if inside >= 2 and window > 0 and window >= 0.5 * (done_at[n - 1] - t0):
            return inside / window, window, w
    if n - drain - w >= 2:
        n -= drain
    if n - w < 2:
        return float("nan"), 0.0, w
    window = done_at[n - 1] - done_at[w]
    if window <= 0:  # every counted frame was released at one instant (held behind a slow one)
        return float("nan"), 0.0, w
    return (n - 1 - w) / window, window, w


@dataclass
class RunReport:
    name: str  # 'plan', 'single', 'parallel', ...
    frames: int  # frames completed
    warmup: int
    throughput: float  # frames/s in steady state
    latency: dict[str, float]  # s: p50/p90/p99/max/mean
    utilisation: dict[str, float] = field(default_factory=dict)  # element -> busy share
    predicted: dict[str, Any] = field(default_factory=dict)
    checked_frames: int = 0
    max_abs_error: float = 0.0
    complete: bool = True  # False when interrupted
    notes: dict[str, Any] = field(default_factory=dict)
    energy: dict[str, Any] = field(default_factory=dict)  # runtime.energy.run_energy
    # the kept outputs against the fp32 reference (model.accuracy.AccuracyReport.to_dict),
    # with the precisions the elements ran and where the frames came from
    accuracy: dict[str, Any] = field(default_factory=dict)
    # perf_counter instants the steady window began and ended, for what is measured beside the
    # frames over the same window (energy counters); not part of the report itself
    window_at: tuple[float, float] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "window_at"}


def stream_report(done_at: list[float], latencies: list[float], warmup: int,
                  busy: dict[str, float], t_start: float, complete: bool,
                  predicted: dict[str, Any], drain: int = 0,
                  completed_at: list[float] | None = None, last_entry: float | None = None,
                  **notes: Any) -> RunReport:
    """A plan's run, from when each frame was released and its latency: the steady rate after
    `warmup` frames (`steady_throughput`), latency percentiles, and each element's busy share
    of the wall time."""
    n = len(done_at)
    thr, window, w = steady_throughput(done_at, warmup, drain, completed_at, last_entry)
    if drain:
        notes["drain_frames"] = drain
    wall = (done_at[-1] - t_start) if n else 0.0
    util = {el: min(1.0, b / wall) for el, b in busy.items()} if wall > 0 else {}
    return RunReport("plan", n, w, thr, latency_stats(latencies[w:]), util, dict(predicted),
                     complete=complete, notes={"wall_s": wall, "window_s": window, **notes},
                     window_at=(done_at[w], done_at[w] + window) if window > 0 else None)

