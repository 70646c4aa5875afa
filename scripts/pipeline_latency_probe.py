"""The analysis' latency of a two-stage pipeline against the engine's, with exact firing times:
stage 1 on cpu0 (T0 seconds a frame), stage 2 on cpu1 (T1), FIFOs of CAP frames, run by the
real engine with runners that sleep those times. The analysis' latency clocks the source at the
period; the engine feeds frames as fast as the FIFOs take them, so where a later stage is the
slowest, frames wait in front of it and the measured latency grows with the FIFOs, which
`saturated_latency` (the sources not clocked) predicts. With RATE, frames arrive on a clock of
RATE frames/s instead (`hetflow run --rate`), and the analysis' latency with the sources clocked
at that period is the prediction.
Usage: python scripts/pipeline_latency_probe.py T0 T1 CAP FRAMES [RATE]"""
import json
import sys
import time

import numpy as np

from hetflow.mapping.mapping import Mapping
from hetflow.mapping.plan import Plan
from hetflow.dataflow.analysis import latency
from hetflow.mapping.problem import Problem, build_app, evaluate, saturated_latency, timed_graph
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform.spec import ProcessingElement
from hetflow.runtime.engine import PreparedPlan, run_prepared
from hetflow.runtime.inputs import random_source

T0, T1, CAP, FRAMES = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
RATE = float(sys.argv[5]) if len(sys.argv) > 5 else None
graph = random_cnn_graph(4, 0)
tensors = {t: np.zeros(1, np.float32) for t in graph.tensors}
names = [l.name for l in graph.layers]
cut = len(names) // 2


class Sleep:
    """A runner whose every run takes `t` seconds and returns every tensor."""
    caller_cores = (0,)

    def __init__(self, t: float):
        self.t = t

    def run(self, feeds):
        time.sleep(self.t)
        return tensors


elements = [ProcessingElement(f"cpu{i}", "cpu", (i,), cluster="c") for i in range(2)]
per_layer = [T0 / cut if i < cut else T1 / (len(names) - cut) for i in range(len(names))]
problem = Problem(graph, elements, np.column_stack([per_layer, per_layer]),
                  lambda nbytes, src, dst: 0.0, call_overhead=0.0, capacity_frames=CAP)
mapping = Mapping({l: f"cpu{int(i >= cut)}" for i, l in enumerate(names)})
metrics = evaluate(problem, mapping)
app = build_app(problem, mapping)
plan = Plan(graph.name, graph.model_hash, "", "probe", mapping, app,
            {e.name: e for e in elements}, CAP,
            {"throughput": metrics.throughput, "latency": metrics.latency}, "probe")
runners = {("cpu0", 0): Sleep(T0), ("cpu1", 0): Sleep(T1)}
report = run_prepared(PreparedPlan(plan, graph, runners, {}), random_source(graph), FRAMES,
                      arrivals=None if RATE is None else np.arange(FRAMES) / RATE)[0]
paced = {}
if RATE is not None:
    lg = timed_graph(problem, app, mapping, for_latency=True)
    paced = {"rate_fps": RATE, "predicted_latency_at_rate_s": latency(lg, 1 / RATE).steady}
print(json.dumps({"t0_s": T0, "t1_s": T1, "capacity_frames": CAP, "frames": FRAMES, **paced,
                  "predicted_fps": metrics.throughput, "predicted_latency_s": metrics.latency,
                  "predicted_latency_saturated_s": saturated_latency(problem, mapping),
                  "measured_fps": report.throughput, "p50_s": report.latency["p50"],
                  "p99_s": report.latency["p99"]}))
