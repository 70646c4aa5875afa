"""Cluster descriptions: YAML validation and round trip, node-prefixed elements with their Ray
placement, the link model, the transfer model the mapping search uses, node-aware conflicts, and
the naming of detected Ray nodes. (detect_cluster on a live Ray cluster is tested in
tests/runtime/test_ray_engine.py, which starts one.)"""
import math

import pytest
from hypothesis import given, strategies as st

from hetflow.errors import InputError
from hetflow.plan.mapping import Mapping
from hetflow.mapping.problem import build_app, timed_graph
from hetflow.model.synthetic import random_cnn_graph
from hetflow.mapping.cluster import ClusterTransfer, cluster_problem
from hetflow.platform.cluster import (Link, cluster_from_dict, dump_cluster, load_cluster,
                                      split_element)
from hetflow.profile.clusters import name_nodes
from hetflow.profile.profile import Profile

BOARD = {"name": "board", "clusters": [{"name": "cpu", "cores": "0-1"}],
         "gpus": [{"index": 0, "name": "igpu", "driver_core": 1}]}
TWO_CORES = {"name": "duo", "clusters": [{"name": "cpu", "cores": "0-1"}]}


def doc(**over):
    d = {"name": "edge", "nodes": [{"name": "n1", "platform": TWO_CORES},
                                   {"name": "n2", "platform": TWO_CORES, "address": "10.0.0.2",
                                    "ray_resource": None}],
         "links": [{"src": "n1", "dst": "n2", "bandwidth_mbps": 1000, "latency_ms": 0.5}]}
    d.update(over)
    return d


def test_yaml_round_trip_keeps_nodes_links_and_platforms(tmp_path):
    c = cluster_from_dict(doc(default_link={"bandwidth_mbps": 100, "latency_ms": 2}), "c.yaml")
    path = tmp_path / "c.yaml"
    path.write_text(dump_cluster(c))
    back = load_cluster(path)
    assert [n.name for n in back.nodes] == ["n1", "n2"]
    assert back.nodes[1].address == "10.0.0.2"
    assert back.nodes[0].platform.platform_hash == c.nodes[0].platform.platform_hash
    for pair in [("n1", "n2"), ("n2", "n1")]:  # undirected in the source: both directions
        assert back.link(*pair).time(10 ** 6) == pytest.approx(c.link(*pair).time(10 ** 6))
    assert back.default_link.time(1) == pytest.approx(c.default_link.time(1))


def test_node_platform_may_be_a_file_next_to_the_cluster_file(tmp_path):
    (tmp_path / "duo.yaml").write_text("name: duo\nclusters: [{name: cpu, cores: '0-1'}]\n")
    (tmp_path / "c.yaml").write_text(
        "name: c\nnodes: [{name: a, platform: duo.yaml}, {name: b, platform: jetson_tx2}]\n"
        "default_link: {bandwidth_mbps: 100, latency_ms: 1}\n")
    c = load_cluster(tmp_path / "c.yaml")
    assert c.node("a").platform.name == "duo" and c.node("b").platform.gpus


@pytest.mark.parametrize("change, message", [
    ({"links": []}, r"c.yaml: links: no link from n1 to n2 and no default_link"),
    ({"links": [{"src": "n1", "dst": "n3", "bandwidth_mbps": 1, "latency_ms": 1}]},
     r"c.yaml: links\[0\].dst: no node 'n3'"),
    ({"links": [{"src": "n1", "dst": "n2", "bandwidth_mbps": 0, "latency_ms": 1}]},
     r"c.yaml: links\[0\].bandwidth_mbps: expected a positive number"),
    ({"links": [{"src": "n1", "dst": "n2", "bandwidth_mbps": 1, "latency_ms": 1, "mtu": 9000}]},
     r"c.yaml: links\[0\].mtu: unknown key"),
    ({"nodes": [{"name": "n1", "platform": TWO_CORES}, {"name": "n1", "platform": TWO_CORES}]},
     r"c.yaml: nodes\[1\].name: node 'n1' listed twice"),
    ({"nodes": [{"name": "1x", "platform": TWO_CORES}]},
     r"c.yaml: nodes\[0\].name: expected a name"),
    ({"nodes": [{"name": "n1"}]}, r"c.yaml: nodes\[0\].platform: missing"),
    ({"nodes": [{"name": "n1", "platform": {"name": "x", "clusters": [{"name": "c"}]}}]},
     r"c.yaml: nodes\[0\].platform: clusters\[0\].cores: missing"),
    ({"switches": 2}, r"c.yaml: switches: unknown key"),
])
def test_bad_cluster_files_name_the_setting(change, message):
    with pytest.raises(InputError, match=message):
        cluster_from_dict(doc(**change), "c.yaml")


@given(mbps=st.floats(0.1, 1e5), latency_ms=st.floats(0, 100), n=st.integers(0, 10 ** 9),
       m=st.integers(1, 10 ** 9))
def test_link_time_is_latency_plus_bytes_over_bandwidth(mbps, latency_ms, n, m):
    link = Link.from_network(mbps, latency_ms)
    if n == 0:
        assert link.time(0) == 0.0  # nothing to send costs nothing
    else:
        assert link.time(n) == pytest.approx(latency_ms / 1e3 + 8 * n / (mbps * 1e6))
    assert link.time(n + m) >= link.time(n)
    ab = Link.from_ab(link.a, link.b)
    assert ab.time(m) == pytest.approx(link.time(m))


def test_elements_are_named_by_node_and_placed_on_it():
    c = cluster_from_dict(doc(), "c.yaml")
    els = {e.name: e for e in c.elements({"n2": "cpu:1+1"})}
    assert sorted(els) == ["n1:cpu0-1", "n2:cpu0", "n2:cpu1"]
    assert els["n1:cpu0-1"].resources == {"hetflow_node_n1": 0.001}
    assert els["n2:cpu0"].resources == {"node:10.0.0.2": 0.001}  # by address, no ray_resource
    assert els["n2:cpu0"].cores == (0,)  # the node's own core ids: the runtime pins on the node
    assert els["n1:cpu0-1"].equivalence_key != c.elements()[1].equivalence_key
    assert split_element("n2:cpu0") == ("n2", "cpu0") and split_element("cpu0") == (None, "cpu0")


def profile_for(graph, platform, elements, layer_s=1e-3, comm=None) -> Profile:
    kinds = {e: ("gpu" if e.startswith("gpu") else "cpu") for e in elements}
    return Profile(graph.name, graph.model_hash, platform.name, platform.platform_hash,
                   elements={e: {"kind": k} for e, k in kinds.items()},
                   layer_times={e: {l.name: {"median": layer_s} for l in graph.layers}
                                for e in elements},
                   comm=comm or {"cpu->cpu": {"a": 1e-5, "b": 1e-10},
                                 "cpu->gpu": {"a": 2e-5, "b": 2e-10},
                                 "gpu->cpu": {"a": 3e-5, "b": 3e-10}})


def test_transfer_uses_the_profile_within_a_node_and_the_link_across():
    c = cluster_from_dict(doc(nodes=[{"name": "n1", "platform": BOARD},
                                     {"name": "n2", "platform": TWO_CORES}]), "c.yaml")
    g = random_cnn_graph(4, 0)
    profs = {"n1": profile_for(g, c.node("n1").platform, ["cpu0", "gpu0"]),
             "n2": profile_for(g, c.node("n2").platform, ["cpu0-1"])}
    tr = ClusterTransfer(c, profs)
    n = 10 ** 6
    link = c.link("n1", "n2").time(n)
    assert tr(n, "n1:cpu0", "n1:cpu0") == 0.0
    assert tr(n, "n1:cpu0", "n1:gpu0") == pytest.approx(2e-5 + 2e-10 * n)
    assert tr(n, "n1:cpu0", "n2:cpu0-1") == pytest.approx(link)
    # from a GPU on n1: device->host on n1, then the network
    assert tr(n, "n1:gpu0", "n2:cpu0-1") == pytest.approx(link + 3e-5 + 3e-10 * n)
    with pytest.raises(InputError, match="no profile for node 'n2'"):
        ClusterTransfer(c, {"n1": profs["n1"]})(n, "n1:cpu0", "n2:cpu0-1")


def test_mapping_search_counts_the_network_and_nodes_do_not_conflict():
    g = random_cnn_graph(12, 3)
    names = [l.name for l in g.layers]
    mapping = Mapping({l: ("n1:cpu0-1" if i < 6 else "n2:cpu0-1") for i, l in enumerate(names)},
                      "maximal")
    fps = {}
    for mbps in (10000.0, 1.0):
        c = cluster_from_dict(doc(links=[{"src": "n1", "dst": "n2", "bandwidth_mbps": mbps,
                                          "latency_ms": 0.1}]), "c.yaml")
        profs = {n.name: profile_for(g, n.platform, ["cpu0-1"]) for n in c.nodes}
        problem = cluster_problem(g, c, profs)
        # same core ids on two nodes: usable together
        assert not problem.conflicts.any()
        app = build_app(problem, mapping)
        assert {ch.src for ch in app.channels} | {ch.dst for ch in app.channels} == {
            "n1:cpu0-1", "n2:cpu0-1"}
        graph = timed_graph(problem, app, mapping)
        assert max(ch.transfer_time for ch in graph.channels) == pytest.approx(max(
            c.link(ch.src.split(":")[0], ch.dst.split(":")[0]).time(ch.nbytes)
            for ch in app.channels))
        from hetflow.dataflow.analysis import throughput_mcr

        fps[mbps] = throughput_mcr(graph).throughput
    assert fps[1.0] < fps[10000.0]  # a slow link shows in the prediction


def test_one_node_elements_sharing_a_core_still_conflict():
    c = cluster_from_dict(doc(), "c.yaml")
    g = random_cnn_graph(4, 1)
    profs = {n.name: profile_for(g, n.platform, ["cpu0-1", "cpu0", "cpu1"]) for n in c.nodes}
    problem = cluster_problem(g, c, profs, configs={"n1": "cpu:1+1", "n2": "cpu:2"})
    with pytest.raises(InputError, match="share cores"):
        problem.check_elements_compatible(["n1:cpu0", "n1:cpu0"])
    problem.check_elements_compatible(["n1:cpu0", "n1:cpu1", "n2:cpu0-1"])


def test_detected_nodes_are_named_by_their_hetflow_resource_else_by_position():
    nodes = [
        {"NodeManagerAddress": "10.0.0.1", "Resources": {"CPU": 4, "hetflow_node_cam": 1}},
        {"NodeManagerAddress": "10.0.0.2", "Resources": {"CPU": 4}},
        {"NodeManagerAddress": "10.0.0.3", "Resources": {"CPU": 4}},
        {"NodeManagerAddress": "10.0.0.3", "Resources": {"CPU": 2}},
    ]
    assert name_nodes(nodes) == [
        ("cam", "hetflow_node_cam", "10.0.0.1"),
        ("n1", None, "10.0.0.2"),  # unique address: placed by Ray's node:<address> resource
        ("n2", "hetflow_node_n2", "10.0.0.3"),  # shared address: needs the hetflow resource
        ("n3", "hetflow_node_n3", "10.0.0.3"),
    ]


def test_latency_only_link_has_infinite_bandwidth():
    c = cluster_from_dict(doc(links=[{"src": "n1", "dst": "n2", "latency_ms": 3}]), "c.yaml")
    assert math.isinf(c.link("n1", "n2").bandwidth_bps)
    assert c.link("n2", "n1").time(10 ** 9) == pytest.approx(3e-3)
