"""The multi-plan file: one single-application `Plan` per application, with its period,
deadline, priority and streams (N streams of the model at that period, named NAME/0 ..
NAME/N-1, one plan for all), which elements the applications share, and the predicted response
times. What `hetflow run-multi` executes."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetflow.errors import InputError
from hetflow.plan.plan import Plan
from hetflow.io import write_json
from hetflow.mapping.planner import make_plan
from hetflow.mapping.problem import Metrics
from hetflow.multi.problem import device_of, own_servers, pool_name, thin_bounds
from hetflow.schema import validate

if TYPE_CHECKING:
    from hetflow.mapping.problem import Metrics

MULTIPLAN_VERSION = 1


@dataclass
class AppEntry:
    name: str
    period: float  # s between releases; 0: free-running
    priority: int  # lower number = higher priority
    plan: Plan
    predicted: dict[str, Any] = field(default_factory=dict)  # response_isolated/worst, slack, ...
    deadline: float | None = None  # s from a frame's release; None: the period
    streams: int = 1  # streams of the model released every period, first come first served

    @property
    def release_every(self) -> float:
        """Seconds between releases of its frames, its streams together: their releases
        spread evenly over the period (0: free-running). Frame j is stream j % streams's."""
        return self.period / self.streams

    @property
    def relative_deadline(self) -> float:
        """How long after its release each frame must be done (0: none, free-running)."""
        return self.period if self.deadline is None else self.deadline

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "period_s": self.period, "priority": self.priority,
                **({"deadline_s": self.deadline} if self.deadline is not None else {}),
                **({"streams": self.streams} if self.streams != 1 else {}),
                "predicted": self.predicted, "plan": self.plan.to_dict()}


@dataclass
class MultiPlan:
    platform_name: str
    apps: list[AppEntry]  # highest priority first
    predicted: dict[str, Any] = field(default_factory=dict)  # energy, utilisation, schedulable
    search: dict[str, Any] = field(default_factory=dict)
    # a GPU's lanes: "shared" by every application on it (at most its lane count in flight
    # among them), or each application's "own" (each at its plan's lanes, all at once)
    gpu_lanes: str = "shared"

    @property
    def shared_elements(self) -> dict[str, list[str]]:
        """Element -> the applications that run on it, for elements used by two or more."""
        users: dict[str, list[str]] = {}
        for a in self.apps:
            for e in a.plan.mapping.elements:
                users.setdefault(e, []).append(a.name)
        return {e: names for e, names in users.items() if len(names) > 1}

    def validate(self, source: str = "multi-plan") -> None:
        if not self.apps:
            raise InputError(f"{source}: holds no application")
        names, prios = set(), {}
        for a in self.apps:
            if a.name in names:
                raise InputError(f"{source}: application {a.name!r} appears twice")
            names.add(a.name)
            if a.priority in prios:
                raise InputError(f"{source}: priority clash: applications {prios[a.priority]} and "
                                 f"{a.name} both have priority {a.priority}")
            prios[a.priority] = a.name
            for actor in a.plan.mapping.actors:
                if "|" in actor:
                    raise InputError(f"{source}: application {a.name} uses replica group "
                                     f"{actor!r}; multi-plans run one element per actor")
        by_el: dict[str, Any] = {}
        for a in self.apps:
            for name, el in a.plan.elements.items():
                if name in by_el and by_el[name] != el:
                    raise InputError(f"{source}: element {name} is described differently by "
                                     f"two applications")
                by_el[name] = el

    def to_dict(self) -> dict[str, Any]:
        return {"version": MULTIPLAN_VERSION, "kind": "hetflow-multiplan",
                "platform_name": self.platform_name,
                "shared_elements": self.shared_elements,
                "priorities": {a.name: a.priority for a in self.apps},
                "predicted": self.predicted, "search": self.search,
                "gpu_lanes": self.gpu_lanes, "apps": [a.to_dict() for a in self.apps]}

    @staticmethod
    def from_dict(d: Any, source: str = "multi-plan") -> "MultiPlan":

        from hetflow.multi.multiplan_schema import MultiPlanFile

        if isinstance(d, dict) and "kind" not in d and "mapping" in d:
            raise InputError(f"{source}: a single-application plan, not a multi-plan: run it "
                             "with `hetflow run`")
        f = validate(MultiPlanFile, d, source, "hetflow multi-plan")
        apps = [AppEntry(a.name, a.period_s, a.priority,
                         Plan.from_file(a.plan, f"{source} (application {a.name})"), a.predicted,
                         a.deadline_s, a.streams)
                for a in f.apps]
        mp = MultiPlan(f.platform_name, sorted(apps, key=lambda a: a.priority), f.predicted,
                       f.search, f.gpu_lanes)
        mp.validate(source)
        return mp

    def save(self, path: str | Path) -> Path:

        return write_json(path, self.to_dict())

    @staticmethod
    def load(path: str | Path) -> "MultiPlan":
        path = Path(path)
        if not path.exists():
            raise InputError(f"{path}: no such multi-plan file")
        try:
            d = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InputError(f"{path}: not a JSON multi-plan file ({e})") from None
        return MultiPlan.from_dict(d, str(path))


def app_prediction(cand, name: str) -> dict[str, Any]:
    a = cand.analysis[name]
    sched = next(s for s in cand.schedules if s.name == name)
    return {"response_isolated": a.response_isolated, "response_worst": a.response_worst,
            "eq11_min_slack": a.eq11_min_slack, "schedulable": a.schedulable,
            "bottleneck": a.bottleneck,
            "tasks": [{"task": t.name, "element": t.element, "time_s": t.time,
                       "asap_s": float(sched.asap[i]), "eq11_slack_s": a.task_slack[t.name]}
                      for i, t in enumerate(sched.tasks)]}


def app_metrics(sched, analysis, powers: dict, lanes: dict[str, int] | None = None
                ) -> "Metrics":
    """Single-plan metrics of one application in the multi setting: each of its streams runs
    one frame per period, so throughput is streams/period and latency the predicted worst
    response time; a firing on k lanes holds a k-th of the element, one of b frames a b-th."""

    share = {e: sched.busy(e) / (lanes or {}).get(e, 1) / sched.batch_of(e)
             for e in sched.elements}
    util = {e: sched.streams * t / sched.period for e, t in share.items()}
    watts = [powers.get(e) for e in sched.elements]
    energy = (sum(t * powers[e] for e, t in share.items())
              if all(w is not None for w in watts) else None)
    # an application's own lanes on a GPU (`pool_name`) are written as the element's
    return Metrics(sched.streams / sched.period, analysis.response_worst,
                   analysis.response_isolated, {device_of(e): u for e, u in util.items()},
                   energy, {}, {device_of(e): sched.busy(e) for e in sched.elements},
                   [device_of(analysis.bottleneck)],
                   lanes={device_of(e): k for e, k in (lanes or {}).items() if e in share},
                   batch={device_of(e): b for e, b in sched.batch.items() if b > 1})


def make_multiplan(mp, result, strategy: str = "multi") -> MultiPlan:
    """The multi-plan of a search's chosen joint mapping (`mp`: MultiProblem,
    `result`: MultiSearchResult)."""

    cand = result.chosen
    powers = own_servers(mp, cand.mappings, cand.device_frames)[2] if cand.own_lanes \
        else mp.powers()
    apps, uses = [], {}
    for a, mapping, sched in zip(mp.apps, cand.mappings, cand.schedules):
        # the lanes and batch analysed, written out (else make_plan would fit its own)
        used = set(mapping.elements)
        uses[a.name] = sorted(used)
        mine = {e: pool_name(e, a.name) if e in cand.device_frames else e for e in used}
        mapping = replace(mapping, lanes={e: cand.lanes.get(mine[e], 1) for e in used
                                          if e in a.problem.lane_slowdown},
                          batch={e: cand.batch.get(mine[e], 1) for e in used})
        metrics = app_metrics(sched, cand.analysis[a.name], powers, cand.lanes)
        plan = make_plan(a.problem, mapping, metrics, strategy, mp.platform_name,
                         {"profile": a.profile_source, "calibration": a.calibration,
                          "steps": a.steps, "time_stat": mp.time_stat}, a.fuse,
                         interleave=False)  # the schedulability analysis fires frame by frame
        plan.model_source = a.spec.model  # as given (a zoo name, or a path from here)
        apps.append(AppEntry(a.name, a.spec.period, a.spec.priority, plan,
                             app_prediction(cand, a.name), a.spec.deadline, a.spec.streams))
    naive = {n: {"response_worst": x.response_worst, "schedulable": x.schedulable}
             for n, x in result.naive.analysis.items()}
    predicted = {"schedulable": cand.feasible, "energy_j_per_s": cand.energy,
                 "margin": cand.margin, "utilisation": cand.utilisation, "lanes": cand.lanes,
                 "batch": cand.batch, **({"device_frames": cand.device_frames}
                                         if cand.own_lanes else {}),
                 "naive": naive, "naive_schedulable": result.naive.feasible}
    search = {**result.notes, "evaluations": result.evaluations,
              "seconds": round(result.seconds, 3), "front_size": len(result.front),
              "objectives": result.objectives, "time_stat": mp.time_stat}
    if (thin := thin_bounds(mp, uses)):
        search["notes"] = [*search.get("notes", []), *thin]
    return MultiPlan(mp.platform_name, sorted(apps, key=lambda e: e.priority), predicted, search,
                     "own" if cand.own_lanes else "shared")
