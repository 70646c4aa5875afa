"""Search a mapping with a strategy and turn the best one into a Plan."""
from __future__ import annotations

import time


from .mapping import Mapping, group_members
from .plan import Plan
from .problem import Metrics, Problem, build_app
from .strategies.base import SearchResult, check_options, get_strategy


def make_plan(problem: Problem, mapping: Mapping, metrics: Metrics, strategy: str,
              platform_name: str, search: dict | None = None, fuse: bool = False) -> Plan:
    g = problem.graph
    app = build_app(problem, mapping)
    elements = {e: problem.element(e) for a in app.phases for e in group_members(a)}
    return Plan(g.name, g.model_hash, g.source, platform_name, mapping, app, elements,
                problem.capacity_frames, metrics.to_dict(), strategy, search or {}, fuse)


def search_plan(problem: Problem, strategy: str, platform_name: str, seed: int = 0,
                fuse: bool = False, **options) -> tuple[Plan, SearchResult]:
    fn = get_strategy(strategy)
    check_options(strategy, options)
    t0 = time.perf_counter()
    result = fn(problem, seed=seed, **options)
    seconds = time.perf_counter() - t0
    plan = make_plan(problem, result.best, result.metrics, strategy, platform_name,
                     {"seed": seed, "seconds": round(seconds, 3), "evaluations": result.evaluations,
                      "space_size": result.space_size, **{k: v for k, v in result.notes.items()
                                                          if isinstance(v, (int, float, str))}},
                     fuse)
    return plan, result


def describe_stages(plan: Plan, problem: Problem | None = None) -> list[dict]:
    rows = []
    stage_times = plan.predicted.get("stage_times", {})
    util = plan.predicted.get("utilisation", {})
    for actor, phases in plan.app.phases.items():
        layers = [l for p in phases for l in p.layers]
        rows.append({"actor": actor, "elements": list(group_members(actor)),
                     "phases": len(phases), "layers": len(layers), "first": layers[0],
                     "last": layers[-1], "busy_s": stage_times.get(actor),
                     "utilisation": max((util.get(e, 0.0) for e in group_members(actor)), default=0.0)})
    return rows
