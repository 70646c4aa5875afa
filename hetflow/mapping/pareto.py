"""A search's Pareto front: written as CSV (and a PNG plot when matplotlib is installed), and
the design `hetflow map --prefer energy` takes from it.

The front is the designs no other design beats on predicted throughput (higher), latency and,
where every design has one, energy per frame (lower): a search's evaluated designs include
dominated ones, which are not a front (a 4.2 frames/s design at 238 ms beside one at 9.0
frames/s and 111 ms)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from hetflow.errors import InfeasibleError
from hetflow.io import save_png, write_csv
from hetflow.mapping.energy import energy_method

COLUMNS = ["throughput_fps", "latency_ms", "energy_j_per_frame", "energy_method",
           "max_memory_mb", "actors", "lanes_batch"]


def non_dominated(points: Sequence[Sequence[float]]) -> list[int]:
    """Indices of the points (throughput, then figures where lower is better: latency, energy,
    ...) that no other point dominates (at least as good in all, better in one), best
    throughput first; equal points are kept once."""
    def dominates(a, b) -> bool:
        return a[0] >= b[0] and all(x <= y for x, y in zip(a[1:], b[1:])) and tuple(a) != tuple(b)

    order = sorted(range(len(points)), key=lambda i: (-points[i][0], *points[i][1:]))
    keep, seen = [], set()
    for i in order:
        p = tuple(points[i])
        if p not in seen and not any(dominates(points[j], p) for j in order):
            keep.append(i)
            seen.add(p)
    return keep


def front_designs(result) -> list:
    """The (mapping, metrics) of `result`'s front (its best alone where it has none) that no
    other dominates (`undominated`)."""
    designs = result.front or [(result.best, result.metrics)]
    return undominated(designs) or designs[:1]


def undominated(designs: list) -> list:
    """The (mapping, metrics) of `designs` with finite figures that no other dominates on
    throughput, latency and, where all have it, energy per frame; fastest first."""
    finite = [(mp, m) for mp, m in designs if m.throughput == m.throughput
              and m.latency == m.latency]
    energy = bool(finite) and all(m.energy_per_frame is not None for _, m in finite)
    points = [(m.throughput, m.latency) + ((m.energy_per_frame,) if energy else ())
              for _, m in finite]
    return [finite[i] for i in non_dominated(points)]


def front_rows(designs: list, problem=None) -> list[dict]:
    """The rows of a front's (mapping, metrics) as the CSV has them, each design's energy with
    how `problem` (the cost model searched) figures it."""
    return [{"throughput_fps": m.throughput, "latency_ms": m.latency * 1e3,
             "energy_j_per_frame": m.energy_per_frame,
             "energy_method": (energy_method(problem, mapping.elements)
                               if problem is not None and m.energy_per_frame is not None
                               else ""),
             "max_memory_mb": max(m.peak_memory.values(), default=0) / 1e6,
             "actors": " ".join(mapping.actors),
             "lanes_batch": " ".join(f"{e} x{mapping.lanes_of(e)} b{mapping.batch_of(e)}"
                                     for e in sorted(set(mapping.lanes) | set(mapping.batch)))}
            for mapping, m in designs]


def least_energy(designs: list, min_rate: float | None = None) -> tuple:
    """The (mapping, metrics) of `designs` with the least predicted energy per frame among
    those predicted at `min_rate` frames/s or more (ties: the faster). InfeasibleError where
    none reaches the rate, naming the fastest."""
    rated = [(mp, m) for mp, m in designs if m.energy_per_frame is not None
             and m.throughput == m.throughput]
    fast = [d for d in rated if min_rate is None or d[1].throughput >= min_rate]
    if not fast:
        top = max((m.throughput for _, m in rated), default=0.0)
        raise InfeasibleError(f"--min-rate {min_rate:g}: no design on the front is predicted "
                              f"that fast (the fastest: {top:.1f} frames/s)")
    return min(fast, key=lambda d: (d[1].energy_per_frame, -d[1].throughput))


def write_front(designs: list, path: str | Path, problem=None) -> Path:
    """A front's (mapping, metrics) as CSV (`front_rows`) and, with matplotlib, a PNG beside
    it: throughput against latency and, where the designs have it, against energy per frame."""
    path = Path(path)
    rows = front_rows(designs, problem)
    write_csv(path, rows, COLUMNS)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return path
    energy = [r for r in rows if r["energy_j_per_frame"] is not None]
    fig, axes = plt.subplots(1, 2 if energy else 1, figsize=(10 if energy else 5, 4),
                             squeeze=False)
    ax = axes[0][0]
    ax.scatter([r["latency_ms"] for r in rows], [r["throughput_fps"] for r in rows])
    ax.set_xlabel("predicted latency (ms)")
    ax.set_ylabel("predicted throughput (frames/s)")
    ax.set_title("Pareto front")
    if energy:
        ax = axes[0][1]
        ax.scatter([r["energy_j_per_frame"] for r in energy],
                   [r["throughput_fps"] for r in energy])
        methods = sorted({r["energy_method"] for r in energy if r["energy_method"]})
        ax.set_xlabel("predicted energy (J/frame" + (f", {'; '.join(methods)}" if methods
                                                     else "") + ")")
        ax.set_ylabel("predicted throughput (frames/s)")
        ax.set_title("throughput against energy")
    fig.tight_layout()
    save_png(fig, path.with_suffix(".png"))
    return path
