"""Helpers shared by the CLI commands: console, JSON output, atomic file writes."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

console = Console()
if not console.is_terminal:  # piped or logged: keep table rows on one line
    console = Console(width=200)
err_console = Console(stderr=True)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write via a temporary file in the same folder and rename: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the usual file mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_csv(path: str | os.PathLike, rows: list[dict], columns: list[str] | None = None) -> Path:
    """Rows as CSV (header from `columns`, else the first row's keys), written atomically."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, columns or (list(rows[0]) if rows else ["id"]))
    w.writeheader()
    w.writerows(rows)
    return atomic_write_text(path, buf.getvalue())


def save_png(fig: Any, path: str | os.PathLike, dpi: int = 100) -> Path:
    """Save a matplotlib figure atomically and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp.png")
    try:
        fig.savefig(tmp, dpi=dpi)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path


def write_json(path: str | os.PathLike, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=1, default=_default) + "\n")


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=1, default=_default))


def _default(o: Any) -> Any:
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, tuple)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def fmt_si(x: float | None, unit: str = "") -> str:
    if x is None:
        return "?"
    for f, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= f:
            return f"{x / f:.2f} {p}{unit}"
    return f"{x:.0f} {unit}".rstrip()
