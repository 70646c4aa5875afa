"""The engine's own ceiling: frames per second through a pipeline whose stages do nothing.

A chain of `stages` one-layer stages, each on its own element (cores taken in turn from this
machine), each stage's runner replaced by one that returns its precomputed output at once: what
is left is the engine (dispatch, channels, in-order release, the GIL). Outputs are still checked
against the reference. `--copies N` instead replicates the whole model on N members fed by
dynamic dispatch (the parallel copies' design): each frame is one firing, so what is measured is
a worker's own cost per frame. Usage: python -m hetflow.bench.engine_ceiling [--stages N |
--copies N] [--frames F]
"""
from __future__ import annotations

import argparse
import json
import os
import time

from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.mapping.mapping import Mapping
from hetflow.mapping.plan import Plan
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform.spec import ProcessingElement


class _Instant:
    """A runner that answers at once with the outputs its stage gave once for the source."""

    def __init__(self, inner, outputs):
        self.inputs, self.outputs, self._out = inner.inputs, inner.outputs, outputs
        self.caller_cores = inner.caller_cores

    def run(self, feeds):
        return self._out

    def close(self):
        pass


def ceiling(stages: int = 3, frames: int = 20_000, repeats: int = 3, copies: int = 0) -> dict:
    """{"fps": best of `repeats` runs, "runs": [...], "stages": n} of a no-op chain (of the
    whole model on `copies` members, where given)."""
    from hetflow.mapping.mapping import group_members, group_name
    from hetflow.runtime.check import check_outputs
    from hetflow.runtime.engine import prepare, run_prepared
    from hetflow.runtime.inputs import random_source

    graph = random_cnn_graph(stages, 0, channels=1, size=1)
    layers = [l.name for l in graph.layers]
    cores = sorted(os.sched_getaffinity(0))
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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", type=int, default=3)
    ap.add_argument("--frames", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--copies", type=int, default=0, help="the whole model on N members instead")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    r = ceiling(a.stages, a.frames, a.repeats, a.copies)
    r["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(r))


if __name__ == "__main__":
    from .script import run_script

    run_script(main, "python -m hetflow.bench.engine_ceiling")
