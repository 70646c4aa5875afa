"""run-multi with a real GPU's lanes (needs a CUDA GPU with torch and onnx2torch; skipped
elsewhere): two applications share a GPU element of 2 lanes, one of them split with a CPU
core, on the thread and the process engines; every output equals the CPU reference.
    pytest tests/multi/test_engine_gpu.py -m gpu
"""
import os

import pytest

from hetflow.platform.spec import ProcessingElement
from hetflow.multi.multiplan import MultiPlan
from hetflow.multi.run import run_multiplan

from test_engine_multi_lanes import check, entry, halves
from test_procs import on_files
from test_runtime import graphs, tiny_problem
from tests.cuda_marks import NEEDS_CUDA


pytestmark = NEEDS_CUDA


@pytest.mark.parametrize("engine", ["threads", "processes"])
def test_two_applications_share_a_gpu_of_two_lanes(engine, tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    els = {"gpu0": ProcessingElement("gpu0", "gpu", (cores[0],), device_index=0),
           "cpu1": ProcessingElement("cpu1", "cpu", (cores[-1],), cluster="cpu")}
    mp = tiny_problem()
    ga, gb = (a.graph for a in mp.apps)
    plan = MultiPlan("test", [
        entry("a", 1, 0.005, ga, {l.name: "gpu0" for l in ga.layers}, els, lanes={"gpu0": 2}),
        entry("b", 2, 0.0, gb, halves(gb, "cpu1", "gpu0"), els, lanes={"gpu0": 2})])
    on_files(plan, tmp_path)
    report = run_multiplan(plan, graphs(mp), frames=200, warmup=10, max_in_flight=3,
                           engine=engine)
    check(report, 200)
