"""Write a search's Pareto front as CSV, and as a PNG plot when matplotlib is installed."""
from __future__ import annotations

from pathlib import Path

from hetflow.cli.common import save_png, write_csv

COLUMNS = ["throughput_fps", "latency_ms", "energy_j_per_frame", "max_memory_mb", "actors"]


def front_rows(result) -> list[dict]:
    rows = []
    for mapping, m in (result.front or [(result.best, result.metrics)]):
        rows.append({"throughput_fps": m.throughput, "latency_ms": m.latency * 1e3,
                     "energy_j_per_frame": m.energy_per_frame,
                     "max_memory_mb": max(m.peak_memory.values(), default=0) / 1e6,
                     "actors": " ".join(mapping.actors)})
    return rows


def write_front(result, path: str | Path) -> Path:
    path = Path(path)
    rows = front_rows(result)
    write_csv(path, rows, COLUMNS)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return path
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter([r["latency_ms"] for r in rows], [r["throughput_fps"] for r in rows])
    ax.set_xlabel("predicted latency (ms)")
    ax.set_ylabel("predicted throughput (frames/s)")
    ax.set_title("Pareto front")
    fig.tight_layout()
    save_png(fig, path.with_suffix(".png"))
    return path
