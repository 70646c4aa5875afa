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


def steady_throughput(done_at: list[float], warmup: int, drain: int = 0
                      ) -> tuple[float, float, int]:
    """Frames per second between the completion of frame `warmup` and the last one but `drain`,
    as (throughput, window seconds, warm-up frames actually excluded); NaN with too few frames.
    (An element that runs frames interleaved finishes its last `drain` frames in a burst once
    no new frame enters: they would count a rate the stream never has.)"""
    n = len(done_at)
    w = min(warmup, max(n - 2, 0))
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

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def stream_report(done_at: list[float], latencies: list[float], warmup: int,
                  busy: dict[str, float], t_start: float, complete: bool,
                  predicted: dict[str, Any], drain: int = 0, **notes: Any) -> RunReport:
    """A plan's run, from when each frame was done and its latency: the steady rate after
    `warmup` frames and before the last `drain`, latency percentiles, and each element's busy
    share of the wall time."""
    n = len(done_at)
    thr, window, w = steady_throughput(done_at, warmup, drain)
    if drain:
        notes["drain_frames"] = drain
    wall = (done_at[-1] - t_start) if n else 0.0
    util = {el: min(1.0, b / wall) for el, b in busy.items()} if wall > 0 else {}
    return RunReport("plan", n, w, thr, latency_stats(latencies[w:]), util, dict(predicted),
                     complete=complete, notes={"wall_s": wall, "window_s": window, **notes})

