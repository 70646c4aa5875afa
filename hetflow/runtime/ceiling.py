"""The engine's own cost: frames through a plan whose runners answer at once.

A chain of `stages` one-layer stages, each on its own element, or the whole model on `copies`
members fed by dynamic dispatch, each runner replaced by one that returns the output it gave
once for the source: what is left is the engine (dispatch, channels, in-order release, the
GIL). Outputs are still checked against the reference. With one copy each frame is one firing,
so the time per frame is what a firing costs the engine beyond its runner (`firing_seconds`:
the profile measures it, and the cost model adds it to every firing).
"""
from __future__ import annotations

import os
import statistics

from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.plan.mapping import Mapping
from hetflow.plan.plan import Plan
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform.spec import ProcessingElement
from hetflow.plan.mapping import group_members, group_name
from hetflow.runtime.check import check_outputs
from hetflow.runtime.engine import prepare, run_prepared
from hetflow.runtime.inputs import random_source


class _Instant:
    """A runner that answers at once with the outputs its stage gave once for the source."""

    def __init__(self, inner, outputs):
        self.inputs, self.outputs, self._out = inner.inputs, inner.outputs, outputs
        self.caller_cores = inner.caller_cores

    def run(self, feeds):
        return self._out

    def close(self):
        pass


def ceiling(stages: int = 3, frames: int = 20_000, repeats: int = 3, copies: int = 0,
            cores: list[int] | None = None) -> dict:
    """{"fps": best of `repeats` runs, "runs": [...], "stages": n} of a no-op chain (of the
    whole model on `copies` members, where given), element i on `cores[i % len(cores)]`
    (default: this process's cores)."""

    graph = random_cnn_graph(stages, 0, channels=1, size=1)
    layers = [l.name for l in graph.layers]
    cores = list(cores or sorted(os.sched_getaffinity(0)))
    names = [f"pe{i}" for i in range(copies or stages)]
    assignment = ({l: group_name(names) for l in layers} if copies else
                  {l: names[i * stages // len(layers)] for i, l in enumerate(layers)})
    app = cnn_to_csdf(graph, assignment, "maximal")
    elements = {n: ProcessingElement(n, "cpu", (cores[i % len(cores)],)) for i, n in enumerate(names)}
    plan = Plan(graph.name, graph.model_hash, "", "engine ceiling", Mapping(assignment, "maximal"),
                app, elements, 2, {"throughput": 0.0}, "ceiling")
    pp = prepare(plan, graph)
    source = random_source(graph, pool=1)
    env = dict(source(0))
    for actor, phases in app.phases.items():  # one real pass: every stage's outputs for frame 0
        for ph in phases:
            members = group_members(actor)
            r = pp.runners[(members[0], ph.index)]
            out = r.run({t: env[t] for t in r.inputs})
            env.update(out)
            for m in members:
                pp.runners[(m, ph.index)] = _Instant(pp.runners[(m, ph.index)], out)
    runs = []
    try:
        for _ in range(repeats):
            report, kept, _ = run_prepared(pp, source, frames, frames // 10,
                                           keep_outputs=lambda f: f < 4)
            err = check_outputs(graph, app, kept, source)
            if err > 1e-4:
                raise AssertionError(f"outputs differ from the reference by {err}")
            runs.append(report.throughput)
    finally:
        pp.close()
    return {"stages": 1 if copies else stages, "copies": copies, "frames": frames,
            "fps": max(runs), "us_per_frame": 1e6 / max(runs), "runs": runs}


def firing_seconds(core: int, frames: int = 3000, repeats: int = 3) -> float:
    """Seconds the engine spends on one firing beyond its runner's work: the median over
    `repeats` runs of the time per frame of the whole (no-op) model on one member pinned to
    `core`. 3.5-8 us on the 2-core VM as its speed moved, 6-8 us between a GPU lane's firings
    in an engine trace on the H100 host."""
    r = ceiling(stages=3, frames=frames, repeats=repeats, copies=1, cores=[core])
    return 1.0 / statistics.median(r["runs"])
