"""Every file hetflow writes goes through here: written to a unique sibling and renamed into
place, so a reader (or an interrupted run) never sees half a file, with the usual file mode
(not mkstemp's 0600)."""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any


def cache_root() -> Path:
    """Where hetflow keeps what it can rebuild (zoo models, quantized sub-networks):
    $HETFLOW_CACHE, else ~/.cache/hetflow."""
    root = os.environ.get("HETFLOW_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "hetflow"


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def json_default(o: Any) -> Any:
    """JSON for hetflow's objects: their `to_dict()`, arrays as lists, sets and tuples too."""
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, tuple)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_json(path: str | os.PathLike, data: Any, allow_nan: bool = True) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=1, default=json_default,
                                              allow_nan=allow_nan) + "\n")


def write_csv(path: str | os.PathLike, rows: list[dict], columns: list[str] | None = None) -> Path:
    """Rows as CSV (header from `columns`, else the first row's keys)."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, columns or (list(rows[0]) if rows else ["id"]))
    w.writeheader()
    w.writerows(rows)
    return atomic_write_text(path, buf.getvalue())


def save_png(fig: Any, path: str | os.PathLike, dpi: int = 100) -> Path:
    """Save a matplotlib figure atomically and close it."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    try:
        fig.savefig(buf, dpi=dpi, format="png")
    finally:
        plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())
