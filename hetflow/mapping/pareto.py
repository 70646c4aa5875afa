"""Write a search's Pareto front as CSV, and as a PNG plot when matplotlib is installed.

The front is the designs no other design beats on both predicted throughput (higher) and
predicted latency (lower): a search's evaluated designs include dominated ones, which are not
a front (a 4.2 frames/s design at 238 ms beside one at 9.0 frames/s and 111 ms)."""
from __future__ import annotations

from pathlib import Path

from hetflow.io import save_png, write_csv

COLUMNS = ["throughput_fps", "latency_ms", "energy_j_per_frame", "max_memory_mb", "actors"]


def non_dominated(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points (throughput, latency) that no other point dominates (at least as
    good in both, better in one), best throughput first; equal points are kept once."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], points[i][1]))
    keep, best_latency, seen = [], float("inf"), set()
    for i in order:
        thr, lat = points[i]
        if lat < best_latency and (thr, lat) not in seen:
            keep.append(i)
            seen.add((thr, lat))
            best_latency = lat
    return keep


def front_rows(result) -> list[dict]:
    designs = result.front or [(result.best, result.metrics)]
    finite = [(mp, m) for mp, m in designs if m.throughput == m.throughput
              and m.latency == m.latency]
    designs = [finite[i] for i in non_dominated([(m.throughput, m.latency) for _, m in finite])] \
        or designs[:1]
    rows = []
    for mapping, m in designs:
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
