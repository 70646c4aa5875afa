"""Write a multi-application search's Pareto front as CSV, and a PNG when matplotlib is there:
one panel per pair of applications (their predicted worst response times), coloured by energy,
like Kang et al.'s Fig. 12."""
from __future__ import annotations

import itertools
from pathlib import Path

from hetflow.io import save_png, write_csv
from hetflow.plan.mapping import describe_design


def front_rows(mp, result) -> list[dict]:
    rows = []
    for k, c in enumerate(result.front):
        row = {"id": k, "chosen": c is result.chosen}
        for a in mp.apps:
            x = c.analysis[a.name]
            row[f"{a.name}_worst_ms"] = round(x.response_worst * 1e3, 4)
            row[f"{a.name}_alone_ms"] = round(x.response_isolated * 1e3, 4)
            row[f"{a.name}_period_ms"] = round(x.period * 1e3, 4)
            row[f"{a.name}_deadline_ms"] = round(x.relative_deadline * 1e3, 4)
            row[f"{a.name}_streams"] = x.streams
        row["energy_j_per_s"] = None if c.energy is None else round(c.energy, 6)
        row["max_response_over_deadline"] = round(c.margin, 4)
        row["max_utilisation"] = round(max(c.utilisation.values(), default=0.0), 4)
        row["elements"] = "; ".join(f"{a.name}: {describe_design(m.actors, c.lanes)}"
                                    for a, m in zip(mp.apps, c.mappings))
        rows.append(row)
    return rows


def write_front(mp, result, path: str | Path) -> Path:
    path = Path(path)
    rows = front_rows(mp, result)
    write_csv(path, rows)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return path
    names = [a.name for a in mp.apps]
    pairs = list(itertools.combinations(names, 2)) or [(names[0], names[0])]
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.6 * len(pairs), 4.0), squeeze=False,
                             layout="constrained")
    energy = [r["energy_j_per_s"] for r in rows]
    colour = energy if all(e is not None for e in energy) else None
    for ax, (x, y) in zip(axes[0], pairs):
        sc = ax.scatter([r[f"{x}_worst_ms"] for r in rows], [r[f"{y}_worst_ms"] for r in rows],
                        s=18, **({"c": colour, "cmap": "viridis"} if colour else {}))
        chosen = [r for r in rows if r["chosen"]]
        ax.scatter([r[f"{x}_worst_ms"] for r in chosen], [r[f"{y}_worst_ms"] for r in chosen],
                   marker="x", c="red", s=60, label="chosen")
        ax.set_xlabel(f"{x} worst response (ms)")
        ax.set_ylabel(f"{y} worst response (ms)")
        ax.legend(loc="best", fontsize=8)
    if colour is not None:
        fig.colorbar(sc, ax=axes[0].tolist(), label="energy (J/s)")
    fig.suptitle("multi-application Pareto front (predicted)")
    save_png(fig, path.with_suffix(".png"))
    return path
