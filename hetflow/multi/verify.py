"""Admission with execution times measured under the set's own load (`map-multi --verify S`).

The response bounds rest on each task's execution time, and the profile times a task alone,
frame after frame. In a run the set's own processes (each element's process, its message
thread, the parent that collects the frames) share the cores with the firings, and a firing
on a period starts with caches its neighbours used: on a 2-core machine with no core to spare,
mobilenet_v2 on one core ran 7.5 ms at most in its profile and up to 15.6 ms in a run of its
set; an admission on profile times admitted sets that then missed 1-57% of a stream's
deadlines. Here the chosen plan runs for a while as `run-multi` runs it, each task's longest
firing there replaces its time where it is longer, and the analysis runs again on those times.
The set is admitted only if that analysis meets every deadline and the trial missed none.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

from hetflow import interrupt
from hetflow.errors import InfeasibleError
from hetflow.multi.multiplan import MultiPlan, make_multiplan
from hetflow.multi.problem import MultiProblem
from hetflow.multi.run import run_multiplan
from hetflow.multi.schedulability import AppSchedule, Task
from hetflow.multi.search import MultiSearchResult, evaluate_joint

TRIAL_WARMUP = 10  # frames of each application not measured (sessions and caches warming)


def trial_frames(mplan: MultiPlan, seconds: float) -> int:
    """Frames each application completes in a trial of about `seconds`: the run ends when the
    one with the longest release interval has this many (`run_multiplan`'s count)."""
    every = max((a.release_every for a in mplan.apps if a.period > 0), default=0.0)
    return max(20, math.ceil(seconds / every)) if every > 0 else 200


def longest_firings(report) -> dict[str, dict[str, float]]:
    """{application: {task: its longest firing in the run, seconds}} from a `MultiRunReport`."""
    return {a.name: {t: st["max"] for t, st in a.notes.get("task_s", {}).items()}
            for a in report.apps}


def with_times(schedule: AppSchedule, longest: dict[str, float]) -> AppSchedule:
    """`schedule` with each task's time the longer of its own and its longest firing seen."""
    return replace(schedule, tasks=[Task(t.name, t.element, max(t.time, longest.get(t.name, 0.0)))
                                    for t in schedule.tasks])


def verify(mp: MultiProblem, result: MultiSearchResult, mplan: MultiPlan, seconds: float,
           progress: Callable[[str], None] | None = None, seed: int = 0
           ) -> tuple[MultiSearchResult, dict]:
    """Run `mplan` (the multi-plan of `result.chosen`) for about `seconds`, and analyse its
    joint mapping again with the times measured there: (the result with that analysis as its
    chosen candidate, a record of the trial: frames, misses, the longest firings, the bounds
    before and after, and whether the set is admitted)."""
    report = run_multiplan(mplan, frames=trial_frames(mplan, seconds), warmup=TRIAL_WARMUP,
                           progress=progress, seed=seed)
    interrupt.check()  # a trial a signal cut short admits nothing (and no plan is written)
    longest = longest_firings(report)
    cand = result.chosen
    schedules = [with_times(s, longest.get(s.name, {})) for s in cand.schedules]
    again = evaluate_joint(mp, cand.mappings, cand.config, True, schedules, cand.own_lanes,
                           cand.device_frames or None)
    missed = {a.name: int(a.notes.get("missed", 0)) for a in report.apps}
    record = {
        "seconds": round(report.wall_s, 2),
        "frames": {a.name: a.frames for a in report.apps},
        "missed": missed,
        "longest_firing_s": longest,
        "bound_profile_s": {n: x.response_worst for n, x in cand.analysis.items()},
        "bound_s": {n: x.response_worst for n, x in again.analysis.items()},
        # the trial's own worst responses: one past its bound says what the bound leaves out
        "worst_response_s": {a.name: a.latency.get("max") for a in report.apps},
        "admitted": again.feasible and not any(missed.values()),
    }
    return replace(result, chosen=again), record


def grown_most(result: MultiSearchResult, longest: dict[str, dict[str, float]]) -> str:
    """' (task T on E: 24.1 ms in the trial, 1.8 in the analysis)' for the task whose longest
    firing in the trial passed its analysed time by the largest factor; '' if none did."""
    grown = [(longest.get(s.name, {}).get(t.name, 0.0) / t.time, t, s.name)
             for s in result.chosen.schedules for t in s.tasks if t.time > 0]
    factor, task, app = max(grown, key=lambda g: g[0], default=(0.0, None, ""))
    if factor <= 1.0 or task is None:
        return ""
    return (f" (its longest-grown firing: {app}'s {task.name} on {task.element}, "
            f"{1e3 * longest[app][task.name]:.1f} ms in the trial, {1e3 * task.time:.2f} ms "
            f"in the analysis)")


def verified(mp: MultiProblem, result: MultiSearchResult, seconds: float, strategy: str,
             progress: Callable[[str], None] | None = None, seed: int = 0
             ) -> MultiSearchResult:
    """`result` analysed again with a trial run's firings (`verify`), its record in
    `notes["verified"]`; InfeasibleError naming the application and why where the trial
    refuses it (as the search refuses a set it cannot admit)."""
    if progress:
        progress(f"a trial run of about {seconds:g} s")
    checked, record = verify(mp, result, make_multiplan(mp, result, strategy), seconds,
                             progress, seed)
    if not record["admitted"]:
        late = {n: k for n, k in record["missed"].items() if k}
        if late:
            why = "; ".join(f"{n} missed {k} of {record['frames'][n]} deadlines"
                            for n, k in late.items())
        else:
            why = ("; ".join(f"{n}: bound {1e3 * x.response_worst:.1f} ms with the trial's "
                             f"firings, deadline {1e3 * x.relative_deadline:.1f} ms"
                             for n, x in checked.chosen.analysis.items() if not x.schedulable)
                   or "the analysis with the trial's firings misses a deadline"
                   ) + grown_most(result, record["longest_firing_s"])
        raise InfeasibleError(f"refused by a {record['seconds']:.0f} s trial run of the plan: "
                              f"{why}")
    past = [f"{n}: {1e3 * w:.1f} ms in the trial, bound {1e3 * record['bound_s'][n]:.1f} ms"
            for n, w in record["worst_response_s"].items()
            if w is not None and w > record["bound_s"].get(n, float("inf"))]
    notes = {**checked.notes, "verified": record}
    if past:  # (admitted: no deadline missed; the bound is still not the worst seen)
        notes["notes"] = [*notes.get("notes", []), "the trial's worst response passed its "
                          "bound (a wait the analysis leaves out): " + "; ".join(past)]
    return replace(checked, notes=notes)
