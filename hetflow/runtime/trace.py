"""Chrome trace-event JSON (opens in Perfetto / chrome://tracing): one track per element."""
from __future__ import annotations

from pathlib import Path
from hetflow.io import write_json


def chrome_trace(events: list[tuple[str, str, int, int, float, float]], t0: float) -> dict:
    """events: (element, actor, phase index, frame, start s, end s) from time.perf_counter."""
    tids = {e: i for i, e in enumerate(sorted({ev[0] for ev in events}))}
    out = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": el}}
           for el, tid in tids.items()]
    for el, actor, phase, frame, s, e in events:
        out.append({"name": f"{actor}#{phase}", "cat": "phase", "ph": "X", "pid": 1,
                    "tid": tids[el], "ts": (s - t0) * 1e6, "dur": (e - s) * 1e6,
                    "args": {"frame": frame}})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def write_trace(path: str | Path, events, t0: float) -> Path:

    return write_json(path, chrome_trace(events, t0))
