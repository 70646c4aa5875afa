"""The analysis' latency of a data-parallel design against the engine's, with exact firing
times: the whole model on a weighted group of NCPU CPU members (TC seconds a frame) and a
GPU-like member with K lanes (TG seconds a frame, the lanes overlapping fully), run by the real
engine with runners that sleep those times (the interpreter lock given up, as a device wait or
an ONNX Runtime call gives it up). Any gap between the predicted latency and the measured p99
is then the model's or the runtime's, not the hardware's. With RATE, frames arrive on a clock of
RATE frames/s (`hetflow run --rate`) and the analysis' latency at that period is the prediction.
Usage: python scripts/dispatch_latency_probe.py TG TC K NCPU {dynamic,static} FRAMES [RATE]"""
import json
import sys
import time
from dataclasses import replace

import numpy as np

from hetflow.mapping.plan import Plan
from hetflow.dataflow.analysis import latency
from hetflow.mapping.problem import Problem, build_app, evaluate, saturated_latency, timed_graph
from hetflow.mapping.strategies.single import weighted_group
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform.spec import ProcessingElement
from hetflow.runtime.engine import PreparedPlan, run_prepared
from hetflow.runtime.inputs import random_source

TG, TC, K, NCPU = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
MODE, FRAMES = sys.argv[5], int(sys.argv[6])
RATE = float(sys.argv[7]) if len(sys.argv) > 7 else None
graph = random_cnn_graph(3, 0)
outs = {t: np.zeros(1, np.float32) for t in graph.outputs}


class Sleep:
    """A runner whose every run takes `t` seconds: `run` for a CPU member, the launch hooks
    for a lane."""
    caller_cores = (0,)

    def __init__(self, t: float):
        self.t, self.deadline = t, 0.0

    def run(self, feeds):
        time.sleep(self.t)
        return outs

    def submit(self, feeds):
        self.deadline = time.perf_counter() + self.t

    def finished(self):
        return time.perf_counter() >= self.deadline

    def wait(self):
        time.sleep(max(0.0, self.deadline - time.perf_counter()))

    def collect(self):  # as a device's runner does, it returns once the run has ended
        self.wait()
        return outs


# elements on distinct cores (the runners never compute, so the cores need not exist)
cpus = [ProcessingElement(f"cpu{i}", "cpu", (i,), cluster="c") for i in range(NCPU)]
gpu = ProcessingElement("gpu0", "gpu", (NCPU,), device_index=0, model="g")
elements = [*cpus, gpu]
n = len(graph.layers)
times = np.column_stack([np.full(n, TC / n)] * NCPU + [np.full(n, TG / n)])
flat = {k: 1.0 for k in (1, 2, 4, 8, 16, 32)}
problem = Problem(graph, elements, times, lambda nbytes, src, dst: 0.0, call_overhead=0.0,
                  lane_slowdown={"gpu0": dict(flat)}, lane_slowdown_busy={"gpu0": dict(flat)})
mapping = replace(weighted_group(problem, [e.name for e in elements]), lanes={"gpu0": K},
                  dispatch_mode=MODE)
metrics = evaluate(problem, mapping)
app = build_app(problem, mapping)
plan = Plan(graph.name, graph.model_hash, "", "probe", mapping, app,
            {e.name: e for e in elements}, 2,
            {"throughput": metrics.throughput, "latency": metrics.latency}, "probe")
runners, more = {}, {}
for phases in app.phases.values():
    for ph in phases:
        for e in elements:
            t = TG if e.kind == "gpu" else TC
            runners[(e.name, ph.index)] = Sleep(t)
            if e.kind == "gpu":
                more[(e.name, ph.index)] = [Sleep(t) for _ in range(K - 1)]
report = run_prepared(PreparedPlan(plan, graph, runners, more), random_source(graph), FRAMES,
                      arrivals=None if RATE is None else np.arange(FRAMES) / RATE)[0]
paced = {}
if RATE is not None:
    lg = timed_graph(problem, app, mapping, for_latency=True)
    paced = {"rate_fps": RATE, "predicted_latency_at_rate_s": latency(lg, 1 / RATE).steady}
print(json.dumps({"tg_s": TG, "tc_s": TC, "lanes": K, "cpu_members": NCPU, "dispatch": MODE,
                  "frames": FRAMES, **paced, "predicted_fps": metrics.throughput,
                  "predicted_latency_s": metrics.latency,
                  "predicted_latency_saturated_s": saturated_latency(problem, mapping),
                  "measured_fps": report.throughput,
                  "p50_s": report.latency["p50"], "p99_s": report.latency["p99"]}))
