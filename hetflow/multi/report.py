"""What a multi-CNN run reports, from what each application measured (`apps.AppRun.results`):
per application the response times from release, the deadlines missed, the split into running
and waiting, and the reference check; per element its utilisation and dispatch delay. Both
engines build it here."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hetflow.runtime.report import RunReport, latency_stats

from hetflow.multi.multiplan import AppEntry, MultiPlan
from hetflow.runtime.check import check_outputs
from hetflow.runtime.inputs import random_source
from hetflow.runtime.trace import write_trace


@dataclass
class MultiRunReport:
    apps: list[RunReport]  # one per application: latency = response times from release
    utilisation: dict[str, float]
    wall_s: float
    complete: bool = True
    dispatch_s: dict[str, float] = field(default_factory=dict)  # element -> mean start delay
    engine: str = "threads"
    realtime: bool | None = None  # asked for: whether every element process got SCHED_FIFO

    def to_dict(self) -> dict:
        return {"apps": [a.to_dict() for a in self.apps], "utilisation": self.utilisation,
                "wall_s": self.wall_s, "complete": self.complete,
                "dispatch_s": self.dispatch_s, "engine": self.engine,
                "realtime": self.realtime}


def app_report(entry: AppEntry, index: int, responses: list[float], done_at: list[float],
               late_releases: int, peak_in_flight: int, kept: dict, warmup: int,
               complete: bool, graph, seed: int, execs: list[float] | None = None,
               task_times: dict | None = None) -> RunReport:
    """One application's report: response times of the frames after `warmup`, the deadlines
    they missed (a response beyond `relative_deadline`), and the reference check of the kept
    frames (inputs from the same seeded source as the run). `execs`: per frame, the seconds
    its firings ran; the report splits each response into that and waiting (late release,
    blocking, queueing), which says whether a long response came from a slow firing or from
    the schedule. `task_times`: per task (actor#phase), the seconds of each frame's firing of
    it; the report gives their statistics (what an admission measured under load reads)."""

    resp = responses[warmup:]
    done = done_at[warmup:]
    thr = (len(done) - 1) / (done[-1] - done[0]) if len(done) >= 2 else float("nan")
    deadline = entry.relative_deadline
    missed = int(np.sum(np.asarray(resp) > deadline)) if deadline > 0 else 0
    r = RunReport(entry.name, len(resp), min(warmup, len(responses)), thr, latency_stats(resp),
                  {}, dict(entry.predicted), complete=complete,
                  notes={"period_s": entry.period, "deadline_s": deadline,
                         "priority": entry.priority, "missed": missed,
                         "late_releases": late_releases, "peak_in_flight": peak_in_flight})
    if entry.streams > 1:  # frame j is stream j % streams's
        r.notes["streams"] = per_stream(entry, resp, warmup)
    r.predicted.pop("tasks", None)
    if execs is not None and len(execs) == len(responses):
        ex = np.asarray(execs[warmup:], dtype=float)
        r.notes["exec_s"] = latency_stats(ex)
        r.notes["wait_s"] = latency_stats(np.asarray(resp, dtype=float) - ex)
    if task_times and len(resp):
        r.notes["task_s"] = {t: latency_stats(np.asarray(x[warmup:len(responses)], dtype=float))
                             for t, x in sorted(task_times.items())}
    if kept:
        src = random_source(graph, seed + index)
        r.max_abs_error = check_outputs(graph, entry.plan.app, kept, src)
        r.checked_frames = len(kept)
    return r


def per_stream(entry: AppEntry, responses: list[float], first: int) -> list[dict]:
    """Each stream's frames, response times and deadline misses, from an application's
    responses of its frames `first`, `first` + 1, ... (frame j is stream j % streams's)."""
    resp = np.asarray(responses, dtype=float)
    owner = (np.arange(len(resp)) + first) % entry.streams
    deadline = entry.relative_deadline
    out = []
    for s in range(entry.streams):
        mine = resp[owner == s]
        out.append({"stream": f"{entry.name}/{s}", "frames": int(len(mine)),
                    **({k: latency_stats(mine)[k] for k in ("p50", "p99", "max")}
                       if len(mine) else {}),
                    "missed": int(np.sum(mine > deadline)) if deadline > 0 else 0})
    return out


def multi_report(mp: MultiPlan, graphs: dict, results: list[dict],
                 dispatch: dict[str, tuple[float, int]], wall: float, complete: bool,
                 warmup: int, seed: int, trace_path, engine: str,
                 realtime: bool | None) -> MultiRunReport:
    """The run's report from each application's results (in `mp.apps`' order) and each
    element's (seconds of dispatch delay, firings), its trace written."""
    reports = [app_report(entry, i, d["responses"], d["done_at"], d["late_releases"],
                          d["peak_in_flight"], d["kept"], warmup, complete, graphs[entry.name],
                          seed, d["execs"], d.get("task_times"))
               for i, (entry, d) in enumerate(zip(mp.apps, results))]
    busy: dict[str, float] = {}
    for d in results:
        for el, b in d["busy"].items():
            busy[el] = busy.get(el, 0.0) + b
    util = {el: min(1.0, b / wall) for el, b in busy.items()} if wall > 0 else {}
    delays = {el: s / n for el, (s, n) in dispatch.items() if n}
    events = [ev for d in results for ev in d["events"]]
    if trace_path is not None and events:
        write_trace(trace_path, events, min(ev[4] for ev in events))
    return MultiRunReport(reports, util, wall, complete, delays, engine, realtime)
