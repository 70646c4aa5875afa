"""The bench times the GPU stages of its candidate plans at their own lane counts before it
predicts them: a stage that is part of the model gets its curve and one-lane time into a new
problem (calibration step "stage lanes", its tables returned for the calibration file), and the
candidates are predicted again with them, best first. The
stand-in GPU backend (tests/fake_gpu) runs the lanes on the CPU."""
import os

import numpy as np
import pytest

import fake_gpu
from hetflow.bench.plans import time_gpu_stages
from hetflow.plan.mapping import Mapping
from hetflow.mapping.planner import make_plan
from hetflow.mapping.problem import Problem, evaluate
from hetflow.model.subnet import subnet_key
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform.spec import ProcessingElement
from hetflow.profile.lanes import slowdown_curves
from patching import patch_everywhere

CORES = sorted(os.sched_getaffinity(0))
CURVE = {1: 1.0, 2: 1.3, 4: 2.0}


def setup(n_layers=8):
    graph = random_cnn_graph(n_layers, 5)
    gpu = fake_gpu.gpu("gpu0", CORES[0])
    cpu = ProcessingElement("cpu0", "cpu", (CORES[-1],))
    times = np.full((len(graph.layers), 2), 1e-3)
    problem = Problem(graph, [gpu, cpu], times, lambda nbytes, src, dst: 0.0 if src == dst
                      else 1e-5, call_overhead=0.0)
    problem.lane_slowdown["gpu0"] = dict(CURVE)
    return graph, problem


def candidate(problem, assignment, lanes):
    m = Mapping(assignment, lanes=lanes)
    return make_plan(problem, m, evaluate(problem, m), "pipeline", "test", {}, True), None


def test_a_partial_gpu_stage_is_timed_at_its_lanes_and_the_candidates_predicted_again():
    graph, problem = setup()
    names = [l.name for l in graph.layers]
    head = names[:5]
    split = candidate(problem, {**{l: "gpu0" for l in head}, **{l: "cpu0" for l in names[5:]}},
                      {"gpu0": 4})
    alone = candidate(problem, {l: "gpu0" for l in names}, {"gpu0": 2})
    logged = []
    fake_gpu.reset(slow=0.003)
    try:
        new, again, tables = time_gpu_stages(graph, problem, [alone, split], "test", 0.2,
                                             logged.append)
    finally:
        fake_gpu.reset()
    key = subnet_key(head)
    # the partial stage was timed at 1 and 4 lanes; the whole model (the profile has its curve)
    # was not
    assert list(tables) == ["gpu0"] and list(tables["gpu0"]) == [key]
    table = tables["gpu0"][key]
    assert set(table) == {"1", "4"} and all(table[k]["alone"]["n"] > 0 for k in table)
    assert new.stage_slowdown == {("gpu0", key): slowdown_curves(table)[0]}
    assert new.subnet_times[("gpu0", key)] == table["1"]["alone"]["median"]
    assert logged == ["timing a stage of 5 layers on gpu0 at 1 and 4 lanes"]
    # the problem given is untouched (a value), the candidates are predicted with the new one
    assert problem.stage_slowdown == {} and ("gpu0", key) not in problem.subnet_times
    got = [p.predicted["throughput"] for p, _ in again]
    assert got == sorted(got, reverse=True)
    for plan, _ in again:
        assert plan.predicted["throughput"] == pytest.approx(
            evaluate(new, plan.mapping).throughput)
    assert {p.mapping.key() for p, _ in again} == {alone[0].mapping.key(), split[0].mapping.key()}


def test_nothing_is_timed_without_a_partial_stage_on_several_lanes():
    graph, problem = setup()
    names = [l.name for l in graph.layers]
    one_lane = candidate(problem, {**{l: "gpu0" for l in names[:4]},
                                   **{l: "cpu0" for l in names[4:]}}, {"gpu0": 1})
    whole = candidate(problem, {l: "gpu0" for l in names}, {"gpu0": 4})
    cands = [whole, one_lane]
    new, again, tables = time_gpu_stages(graph, problem, cands, "test", 0.2, lambda m: None)
    assert new is problem and again is cands and tables == {}


def test_a_stage_that_cannot_be_timed_keeps_the_whole_models_curve(monkeypatch):
    from hetflow.bench import plans
    from hetflow.errors import BackendError
    from hetflow.profile import lanes

    def fail(*args, **kwargs):
        raise BackendError("gpu0 cannot hold 4 lanes of the stage")

    patch_everywhere(monkeypatch, lanes, "measure_stage_lanes", fail)
    graph, problem = setup()
    names = [l.name for l in graph.layers]
    split = candidate(problem, {**{l: "gpu0" for l in names[:5]},
                                **{l: "cpu0" for l in names[5:]}}, {"gpu0": 4})
    logged = []
    new, again, tables = plans.time_gpu_stages(graph, problem, [split], "test", 0.2,
                                               logged.append)
    assert new.stage_slowdown == {} and tables == {}
    assert "cannot hold 4 lanes" in logged[-1] and "whole model's curve" in logged[-1]
    assert again[0][0].predicted["throughput"] == pytest.approx(
        split[0].predicted["throughput"])


@pytest.mark.skipif(len(CORES) < 2, reason="needs 2 cores")
def test_a_bench_with_a_laned_gpu_times_every_partial_gpu_stage_of_its_candidates(
        tmp_path, monkeypatch):
    """The whole bench with the stand-in GPU (its device check and host<->GPU copy benchmark
    faked, as this machine has no CUDA): lane table, laned baselines, and every candidate's GPU
    stage that is part of the model and runs several lanes timed before the plans run, whose
    outputs are checked."""
    import onnx

    import hetflow.platform.detect as detect
    import hetflow.profile.measure as measure
    from hetflow.bench import plans
    from hetflow.bench.core import BenchSettings, bench_model
    from hetflow.model import load_model
    from hetflow.model.synthetic import random_cnn_model
    from hetflow.platform import CpuCluster, Platform
    from hetflow.platform.spec import Gpu
    from hetflow.profile import comm

    monkeypatch.setattr(detect, "cuda_gpus", lambda: [(0, "stand-in")])
    monkeypatch.setattr(measure, "_cuda_available", lambda: True)
    monkeypatch.setattr(comm, "bench_cuda", lambda core, dev, sizes, repeats: {
        link: [[n, 20e-6 + n / 10e9] for n in sizes] for link in ("cpu->gpu", "gpu->cpu")})
    monkeypatch.setenv("HETFLOW_CACHE", str(tmp_path / "cache"))
    calls = []
    real = plans.time_gpu_stages

    def spy(graph, problem, candidates, *args):
        out = real(graph, problem, candidates, *args)
        calls.append((candidates, out[0]))
        return out

    monkeypatch.setattr(plans, "time_gpu_stages", spy)
    fake_gpu.gpu()  # the stand-in backend, registered
    model = tmp_path / "small.onnx"
    onnx.save(random_cnn_model(12, 5), model)
    plat = Platform("two", (CpuCluster("cpu", tuple(CORES[:2])),),
                    (Gpu(0, "stand-in", CORES[1], backend=fake_gpu.NAME),))
    settings = BenchSettings(frames=40, warmup=5, plan_seconds=0.2, pilot_seconds=0.1,
                             baseline_seconds=0.3, profile_repeats=3, lane_seconds=0.2)
    fake_gpu.reset(slow=0.002)
    try:
        mb = bench_model(str(model), plat, settings, report_dir=tmp_path / "rep")
    finally:
        fake_gpu.reset()
    rows = {r["name"]: r for r in mb.rows}
    assert any(n.startswith("parallel copies (gpu0 x") for n in rows)  # the GPU at its lanes
    for name in ("hetflow pipeline", "hetflow single"):
        assert rows[name]["checked_frames"] == 8 and rows[name]["max_abs_error"] < 1e-3
    assert calls  # every plan kind's candidates went through it
    whole = subnet_key(l.name for l in load_model(model, fuse=True).layers)
    for candidates, problem in calls:
        for plan, _ in candidates:
            k = plan.mapping.lanes_of("gpu0")
            for p in plan.app.phases.get("gpu0", []):
                key = subnet_key(p.layers)
                if k > 1 and key != whole:
                    assert k in problem.stage_slowdown[("gpu0", key)]
                    assert problem.subnet_times[("gpu0", key)] > 0
    # the stages timed are the calibration's step "stage lanes", saved for `hetflow map`
    import json

    saved = json.loads((tmp_path / "rep" / f"{mb.model}.calibration.json").read_text())
    timed = {key for _, problem in calls for (e, key) in problem.stage_slowdown}
    assert set(saved.get("stage_lanes", {}).get("gpu0", {})) == timed
