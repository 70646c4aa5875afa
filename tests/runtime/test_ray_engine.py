"""The Ray engine on a local three-node Ray cluster (ray.cluster_utils.Cluster): plans across
nodes give the reference outputs in order, workers land on their nodes and fire in their
programs' orders, a killed worker, a failing phase and a stalled one stop the run naming their
element and node; without Ray, `run_plan(engine="ray")` says how to get it."""
import sys

import pytest

from hetflow.errors import InputError, RuntimeFault
from hetflow.model.synthetic import random_cnn_graph
from hetflow.runtime.api import run_plan
from hetflow.runtime.ray_engine import RAY_MISSING

NODES = ("n0", "n1", "n2")
GRAPHS = {s: random_cnn_graph(16, s) for s in range(4)}


# ---- without a cluster ------------------------------------------------------------------------
def test_without_ray_says_how_to_get_it(plan_for, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    graph = GRAPHS[0]
    plan = plan_for(graph, {l.name: "pe0" for l in graph.layers})
    with pytest.raises(InputError, match=r"--engine ray needs Ray: pip install 'hetflow\[ray\]'"):
        run_plan(plan, graph, engine="ray", frames=4)
    assert RAY_MISSING == "--engine ray needs Ray: pip install 'hetflow[ray]'"


# ---- on a local three-node Ray cluster --------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'hetflow[ray]')")
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "object_store_memory": 100 * 2 ** 20, "include_dashboard": False,
        "resources": {"hetflow_node_n0": 1}})
    for n in NODES[1:]:
        c.add_node(num_cpus=1, object_store_memory=100 * 2 ** 20,
                   resources={f"hetflow_node_{n}": 1})
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def node_ids(ray):
    return {r[len("hetflow_node_"):]: n["NodeID"] for n in ray.nodes() if n["Alive"]
            for r in n["Resources"] if r.startswith("hetflow_node_")}


def test_plan_across_nodes_equals_reference_in_order(cluster, plan_for, tmp_path):
    import json

    import ray

    graph = GRAPHS[1]
    names = [l.name for l in graph.layers]
    # three stages on three nodes; the middle one replicated across two nodes by a weighted
    # dispatch pattern (two frames of three to n1)
    stage = {0: "n0:pe0", 1: "n1:pe1|n2:pe2", 2: "n2:pe3"}
    assignment = {l: stage[min(2, 3 * i // len(names))] for i, l in enumerate(names)}
    plan = plan_for(graph, assignment, dispatch={"n1:pe1|n2:pe2": [0, 1, 0]})
    plan.mapping.dispatch_mode = "static"
    report = run_plan(plan, graph, engine="ray", frames=14, warmup=2, check="all",
                      stall_timeout=60, trace_path=tmp_path / "trace.json")
    assert report.frames == 14 and report.checked_frames == 14
    assert report.max_abs_error < 1e-4
    ids = node_ids(ray)
    for el, w in report.notes["workers"].items():
        node = el.split(":")[0]
        assert w["node"] == node and w["node_id"] == ids[node], el
    assert report.throughput > 0
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    fired = [e for e in trace if e["ph"] == "X"]
    assert len(fired) == 14 * sum(len(ps) for ps in plan.app.phases.values())
    by_member = {}  # dispatch pattern [0, 1, 0]: n1:pe1 takes frames 0, 2, 3, 5, ...
    tracks = {e["tid"]: e["args"]["name"] for e in trace if e["ph"] == "M"}
    for e in fired:
        by_member.setdefault(tracks[e["tid"]], set()).add(e["args"]["frame"])
    assert by_member["n1:pe1"] == {f for f in range(14) if f % 3 != 1}
    assert by_member["n2:pe2"] == {f for f in range(14) if f % 3 == 1}


@pytest.mark.parametrize("round_frames", [1, 2])
def test_interleaved_orders_run_on_their_nodes_in_order(cluster, plan_for, tmp_path,
                                                       round_frames):
    import json

    from hetflow.plan.schedule import phase_sequence

    graph = GRAPHS[2]
    names = [l.name for l in graph.layers]
    # frames go n0 -> n1 -> n0 ...: n0's element runs phases of later frames meanwhile
    plan = plan_for(graph, {l: "n1:pe1" if i % 3 == 2 else "n0:pe0" for i, l in enumerate(names)},
                    policy="maximal")
    offsets = {a: [1] * (len(ps) - 1) + [0] for a, ps in plan.app.phases.items() if len(ps) > 1}
    assert offsets
    plan.mapping.interleave, plan.mapping.round_frames = offsets, round_frames
    plan.check()
    report = run_plan(plan, graph, engine="ray", frames=12, warmup=2, check="all",
                      stall_timeout=60, trace_path=tmp_path / "trace.json")
    assert report.frames == 12 and report.checked_frames == 12
    assert report.max_abs_error < 1e-4
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in trace if e["ph"] == "M"}
    for actor, offs in offsets.items():  # each element fired in its interleaved order
        fired = sorted((e["ts"], e["args"]["frame"], int(e["name"].rsplit("#", 1)[1]))
                       for e in trace if e["ph"] == "X" and tracks[e["tid"]] == actor)
        assert [(f, p) for _, f, p in fired] == list(phase_sequence(range(12), offs,
                                                                      round_frames))


def test_frames_on_a_clock_are_handed_out_no_sooner_than_they_arrive(cluster, plan_for):
    """At 20 frames/s the 12 frames take at least 11 / 20 s, however fast the nodes go (these
    tiny stages go far faster); outputs equal the reference, and the rate is the clock's."""
    graph = GRAPHS[0]
    names = [l.name for l in graph.layers]
    assignment = {l: ("n0:pe0" if i < len(names) // 2 else "n1:pe1") for i, l in enumerate(names)}
    plan = plan_for(graph, assignment, policy="maximal")
    rate, frames = 20.0, 12
    report = run_plan(plan, graph, engine="ray", frames=frames, warmup=2, check="all",
                      stall_timeout=60, rate=rate)
    assert report.checked_frames == frames and report.max_abs_error < 1e-4
    assert report.notes["arrival_rate"] == rate
    assert report.notes["wall_s"] >= (frames - 1) / rate
    assert 0 < report.throughput <= rate + 1 / report.notes["window_s"], report


def test_dynamic_dispatch_gives_every_frame_to_one_member_in_order(cluster, plan_for):
    graph = GRAPHS[3]
    names = [l.name for l in graph.layers]
    # the replica group comes first and last: frames leave it out of order, arrive in order
    stage = {0: "n1:pe1|n2:pe2", 1: "n0:pe0", 2: "n2:pe3|n0:pe4"}
    assignment = {l: stage[min(2, 3 * i // len(names))] for i, l in enumerate(names)}
    plan = plan_for(graph, assignment)
    assert plan.mapping.dispatch_mode == "dynamic"
    report = run_plan(plan, graph, engine="ray", frames=16, warmup=2, check="all",
                      stall_timeout=60)
    assert report.checked_frames == 16 and report.max_abs_error < 1e-4
    taken = {el: w["frames"] for el, w in report.notes["workers"].items()}
    assert taken["n1:pe1"] + taken["n2:pe2"] == 16 and taken["n2:pe3"] + taken["n0:pe4"] == 16
    assert taken["n0:pe0"] == 16 and min(taken.values()) > 0


def test_killing_a_worker_stops_the_run_naming_element_and_node(cluster, plan_for):
    import ray

    graph = GRAPHS[2]
    names = [l.name for l in graph.layers]
    assignment = {l: ("n0:pe0" if i < len(names) // 2 else "n1:pe1") for i, l in enumerate(names)}
    plan = plan_for(graph, assignment, policy="maximal")

    def kill_at_frame_3(f):
        if f == 3:
            victim = [n for n in ray.util.list_named_actors() if n.startswith("hetflow-n1:pe1-")]
            ray.kill(ray.get_actor(victim[0]))

    with pytest.raises(RuntimeFault, match=r"element n1:pe1 on node n1 .*was lost"):
        run_plan(plan, graph, engine="ray", frames=400, warmup=0, check="none",
                 stall_timeout=60, on_frame=kill_at_frame_3)


def test_a_worker_that_cannot_start_is_named(cluster, plan_for):
    from dataclasses import replace

    graph = GRAPHS[3]
    plan = plan_for(graph, {l.name: "n2:pe0" for l in graph.layers})
    plan.elements["n2:pe0"] = replace(plan.elements["n2:pe0"], backend="none")
    with pytest.raises(RuntimeFault, match=r"^element n2:pe0 \(node n2\): its Ray worker failed "
                       r"to start: element n2:pe0 \(node n2\): cannot prepare "
                       r".*no hetflow backend"):
        run_plan(plan, graph, engine="ray", frames=4)


def test_a_failing_phase_stops_the_run_naming_element_node_stage_and_layers(cluster, plan_for):
    import numpy as np

    from hetflow.runtime.inputs import random_source
    from hetflow.runtime.ray_engine import RayPipeline

    graph = GRAPHS[0]
    names = [l.name for l in graph.layers]
    plan = plan_for(graph, {l: ("n1:pe0" if i < 8 else "n2:pe1") for i, l in enumerate(names)},
                    policy="maximal")
    good = random_source(graph)

    def source(f):  # frame 5 has a wrong shape: the first stage's session rejects it
        return good(f) if f != 5 else {t: np.zeros((1, 1), np.float32) for t in graph.inputs}

    pipe = RayPipeline(plan, graph)
    try:
        with pytest.raises(RuntimeFault, match=r"^element n1:pe0 \(node n1\), stage n1:pe0 phase 0 "
                           rf"\(layers {names[0]}\.\.{names[7]}\): BackendError"):
            pipe.run(source, 12, stall_timeout=60)
    finally:
        pipe.close()


def test_a_pipeline_runs_again_counting_afresh(cluster, plan_for):
    import numpy as np

    from hetflow.runtime.inputs import random_source
    from hetflow.runtime.ray_engine import RayPipeline

    graph = GRAPHS[0]
    names = [l.name for l in graph.layers]
    plan = plan_for(graph, {l: ("n1:pe0" if i < 8 else "n2:pe1") for i, l in enumerate(names)},
                    policy="maximal")
    pipe = RayPipeline(plan, graph)
    try:
        runs = [pipe.run(random_source(graph), 6, keep_outputs=lambda f: True, stall_timeout=60)
                for _ in range(2)]
    finally:
        pipe.close()
    (first, a), (second, b) = runs
    assert first.frames == second.frames == 6 and sorted(a) == sorted(b) == list(range(6))
    for f in range(6):
        for t in a[f]:
            np.testing.assert_array_equal(a[f][t], b[f][t])
    assert not np.array_equal(a[0][graph.outputs[0]], a[1][graph.outputs[0]])  # frames differ
    assert second.notes["workers"]["n1:pe0"]["frames"] == 6  # not 12: its counts start again


def test_element_on_a_missing_node_is_refused_by_name(cluster, plan_for):
    graph = GRAPHS[0]
    plan = plan_for(graph, {l.name: "n9:pe0" for l in graph.layers})
    with pytest.raises(InputError, match=r"element n9:pe0: .*'hetflow_node_n9'"):
        run_plan(plan, graph, engine="ray", frames=4)


def test_detect_cluster_names_nodes_and_measures_links(cluster):
    from hetflow.profile.clusters import detect_cluster

    c = detect_cluster(None, sizes=(1 << 10, 4 << 20), repeats=2)
    assert sorted(n.name for n in c.nodes) == sorted(NODES)
    for n in c.nodes:
        assert n.platform.cores and n.resources["CPU"] == 1.0
        assert n.placement == {f"hetflow_node_{n.name}": 0.001}
        assert n.local_link is not None and n.local_link.time(1 << 20) > 0
    for a in NODES:
        for b in NODES:
            if a != b:
                link = c.link(a, b)  # a fit of noisy timings: only its form is certain
                assert link.a >= 0 and link.b >= 0 and link.time(4 << 20) >= link.time(1 << 10) > 0


def test_a_stalled_worker_is_named_after_the_stall_timeout(cluster, plan_for):
    from hetflow.runtime.inputs import random_source
    from hetflow.runtime.ray_engine import RayPipeline

    graph = GRAPHS[0]
    names = [l.name for l in graph.layers]
    plan = plan_for(graph, {l: ("n1:pe0" if i < 8 else "n2:pe1") for i, l in enumerate(names)},
                    policy="maximal")
    pipe = RayPipeline(plan, graph)

    def hang_first_phase(worker):  # runs in the actor: its phase 0 sleeps from the 3rd firing
        import time

        runner, calls = worker.runners[0], [0]

        class Hanging:
            def run(self, feeds):
                calls[0] += 1
                if calls[0] >= 3:
                    time.sleep(5)
                return runner.run(feeds)

        worker.runners[0] = Hanging()

    try:
        import ray

        ray.get(pipe.workers["n1:pe0"].handle.__ray_call__.remote(hang_first_phase))
        with pytest.raises(RuntimeFault, match=r"^stall: no frame completed for 1 s at frame 2; "
                           r"n1:pe0 \(node n1\) has not finished stage n1:pe0 phase 0; "
                           r"n2:pe1 \(node n2\) waits on channel \S+ \(from n1:pe0\)$"):
            pipe.run(random_source(graph), 6, stall_timeout=1.0)
    finally:
        pipe.close()


def test_a_plan_with_gpu_lanes_is_refused_naming_the_element(plan_for):
    graph = random_cnn_graph(6, 0)
    plan = plan_for(graph, {l.name: "pe0" for l in graph.layers})
    plan.mapping.lanes = {"pe0": 4}
    with pytest.raises(InputError, match="the Ray engine runs one lane per GPU, and the plan "
                                         "gives element 'pe0' 4 lanes"):
        run_plan(plan, graph, engine="ray", frames=4)


def test_a_plan_with_a_batched_element_is_refused_naming_the_element(plan_for):
    graph = random_cnn_graph(6, 0)
    plan = plan_for(graph, {l.name: "pe0" for l in graph.layers})
    plan.mapping.batch = {"pe0": 8}
    with pytest.raises(InputError, match="the Ray engine fires frame by frame, and the plan "
                                         "gives element 'pe0' batch 8"):
        run_plan(plan, graph, engine="ray", frames=4)
