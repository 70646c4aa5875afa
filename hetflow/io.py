"""Every file hetflow writes goes through here: written to a unique sibling and renamed into
place, so a reader (or an interrupted run) never sees half a file, with the usual file mode
(not mkstemp's 0600). JSON is strict (RFC 8259): a figure that is not finite (a rate of no
frames, an infinite latency) is written as null, never as NaN or Infinity, which strict
parsers refuse. An output that another hetflow process is writing is refused (`claimed`)."""
from __future__ import annotations

import json
import math
import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from hetflow.errors import InputError
import csv
import io


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


def finite(data: Any) -> Any:
    """`data` with every float that is not finite (NaN, +-inf) replaced by None, through
    dicts, lists, tuples and objects with to_dict() or tolist(); other values as they are."""
    if isinstance(data, float):  # numpy's float64 too
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple, set)):
        return [finite(v) for v in data]
    if hasattr(data, "to_dict") or hasattr(data, "tolist"):
        return finite(json_default(data))
    return data


def dumps(data: Any, indent: int | None = 1) -> str:
    """Strict JSON of `data` (non-finite figures as null)."""
    return json.dumps(finite(data), indent=indent, default=json_default, allow_nan=False)


def write_json(path: str | os.PathLike, data: Any) -> Path:
    return atomic_write_text(path, dumps(data) + "\n")


def lock_path(path: str | os.PathLike) -> Path:
    """The lock file of an output: inside a folder, beside a file."""
    path = Path(path)
    return path / ".hetflow.lock" if path.is_dir() else path.with_name(f".{path.name}.lock")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


@contextmanager
def claimed(path: str | os.PathLike | None, folder: bool = False) -> Iterator[None]:
    """Hold `path` (an output file, or with `folder` a folder) for this process while the
    block runs: a lock file holding this pid, removed at the end. One that a live process
    holds is refused (InputError naming the path and the pid); one whose process is dead is
    stale and taken over. None: nothing to hold."""
    if path is None:
        yield
        return
    path = Path(path)
    if folder:
        path.mkdir(parents=True, exist_ok=True)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    lock = lock_path(path)
    for _ in range(3):  # a stale lock removed by us or another claimant: try again
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                owner = int(lock.read_text().strip() or 0)
            except (OSError, ValueError):
                owner = 0
            if owner and owner != os.getpid() and _alive(owner):
                raise InputError(f"{path}: another hetflow process (pid {owner}) is writing "
                                 f"it (lock {lock})") from None
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()}\n")
        break
    else:
        raise InputError(f"{path}: cannot take its lock {lock}")
    try:
        yield
    finally:
        try:
            if int(lock.read_text().strip() or 0) == os.getpid():
                lock.unlink()
        except (OSError, ValueError):
            pass


def write_csv(path: str | os.PathLike, rows: list[dict], columns: list[str] | None = None) -> Path:
    """Rows as CSV (header from `columns`, else the first row's keys)."""

    buf = io.StringIO()
    w = csv.DictWriter(buf, columns or (list(rows[0]) if rows else ["id"]))
    w.writeheader()
    w.writerows(rows)
    return atomic_write_text(path, buf.getvalue())


def save_png(fig: Any, path: str | os.PathLike, dpi: int = 100) -> Path:
    """Save a matplotlib figure atomically and close it."""

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    try:
        fig.savefig(buf, dpi=dpi, format="png")
    finally:
        plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())
