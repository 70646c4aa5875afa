"""The engine's whole cost per frame with instant runners: a run's wall time (worker, releasing
thread, start and end) over FRAMES frames, divided by FRAMES, for the whole model on one CPU
member and on one GPU-like member of 24 lanes whose runs finish at once, against the parallel
baseline's own loop (`InFlight`) over the same lanes. `hetflow.bench.engine_ceiling --copies 1`
reads the worker's steady rate instead (the releasing thread not in it).
Alternate two versions as scripts/lane_driver_ab.py does.
Usage: python scripts/engine_wall_probe.py [FRAMES]"""
import json
import sys
import time

import numpy as np

from hetflow.backends.inflight import InFlight
from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.mapping.mapping import Mapping
from hetflow.mapping.plan import Plan
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform.spec import ProcessingElement
from hetflow.runtime.engine import PreparedPlan, run_prepared
from hetflow.runtime.inputs import random_source

FRAMES = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
graph = random_cnn_graph(4, 0)
outs = {t: np.zeros(1, np.float32) for t in graph.outputs}
source = random_source(graph)


class Instant:
    """A runner whose runs take no time; with the launch hooks, a GPU lane's."""
    caller_cores = (0,)

    def run(self, feeds):
        return outs

    def submit(self, feeds):
        pass

    def finished(self):
        return True

    def wait(self):
        pass

    def collect(self):
        return outs


def whole_model_plan(element: ProcessingElement, lanes: int) -> Plan:
    assignment = {l.name: element.name for l in graph.layers}
    app = cnn_to_csdf(graph, assignment, "maximal")
    mapping = Mapping(assignment, "maximal", lanes={element.name: lanes} if lanes > 1 else {})
    return Plan(graph.name, graph.model_hash, "", "probe", mapping, app,
                {element.name: element}, 2, {"throughput": 0.0}, "probe")


def engine_us(element: ProcessingElement, lanes: int) -> float:
    plan = whole_model_plan(element, lanes)
    runners = {(element.name, 0): Instant()}  # one lane: fired with `run`
    more = {(element.name, 0): [Instant() for _ in range(lanes - 1)]} if lanes > 1 else {}
    pp = PreparedPlan(plan, graph, runners, more)
    t = time.perf_counter()
    run_prepared(pp, source, FRAMES)
    return (time.perf_counter() - t) / FRAMES * 1e6


def inflight_us(lanes: int) -> float:
    runs = InFlight([Instant() for _ in range(lanes)])
    t = time.perf_counter()
    for f in range(FRAMES):
        if not runs.has_room():
            runs.wait()
            runs.collect()
        runs.submit(source(f), time.perf_counter())
    while len(runs):
        runs.collect()
    return (time.perf_counter() - t) / FRAMES * 1e6


if __name__ == "__main__":
    row = {"frames": FRAMES,
           "engine_cpu_member_us": round(engine_us(ProcessingElement("cpu0", "cpu", (0,)), 1), 2),
           "engine_24_lanes_us": round(engine_us(ProcessingElement("gpu0", "gpu", (0,),
                                                                   device_index=0), 24), 2),
           "inflight_24_lanes_us": round(inflight_us(24), 2)}
    print(json.dumps(row))
