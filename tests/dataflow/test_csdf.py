"""Algorithm 1 and Algorithm 2: structure and liveness for every mapping of random CNN DAGs."""
import networkx as nx
import pytest
from hypothesis import given, settings, strategies as st

from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.dataflow.sdf import cnn_to_sdf
from hetflow.errors import InputError
from hetflow.model.synthetic import random_cnn_graph

GRAPHS = {(n, s): random_cnn_graph(n, s) for n in (6, 14, 25) for s in range(6)}


def phase_graph(app):
    """Phases as nodes; sequence edges inside an actor and data edges along channels and
    local tensors. The application is live iff this graph is acyclic (one frame's firings)."""
    g = nx.DiGraph()
    where = {}
    for a, ps in app.phases.items():
        for p in ps:
            g.add_node(p.key)
            for l in p.layers:
                where[l] = p.key
        for p, q in zip(ps, ps[1:]):
            g.add_edge(p.key, q.key)
    return g, where


@settings(max_examples=150, deadline=None)
@given(key=st.sampled_from(sorted(GRAPHS)), n_actors=st.integers(1, 5), data=st.data(),
       policy=st.sampled_from(["paper", "maximal"]))
def test_every_mapping_gives_a_live_app(key, n_actors, data, policy):
    graph = GRAPHS[key]
    actors = [f"pe{i}" for i in range(n_actors)]
    assignment = {l.name: data.draw(st.sampled_from(actors)) for l in graph.layers}
    app = cnn_to_csdf(graph, assignment, policy)

    # every layer in exactly one phase of the actor it is mapped on
    seen = [l for ps in app.phases.values() for p in ps for l in p.layers]
    assert sorted(seen) == sorted(l.name for l in graph.layers)
    for a, ps in app.phases.items():
        for p in ps:
            assert all(assignment[l] == a for l in p.layers)

    g, where = phase_graph(app)
    for e in graph.edges:
        if where[e.src] != where[e.dst]:
            g.add_edge(where[e.src], where[e.dst])
    assert nx.is_directed_acyclic_graph(g), "a phase waits on its own output: deadlock"

    # a channel for every tensor crossing actors, produced in the producer's phase and
    # consumed no later than the first phase that reads it
    for e in graph.edges:
        sa, da = assignment[e.src], assignment[e.dst]
        if sa != da:
            ch = [c for c in app.channels if c.tensor == e.tensor and c.dst == da]
            assert len(ch) == 1
            assert ch[0].src == sa and ch[0].tokens == graph.tensors[e.tensor].elements
            assert ch[0].dst_phase <= app.phase_of()[e.dst][1]
    # phases list exactly the tensors they read from outside and provide to the outside
    for ps in app.phases.values():
        for p in ps:
            produced = {t for l in p.layers for t in graph.layer(l).outputs}
            assert not set(p.inputs) & produced
            assert set(p.outputs) <= produced


def test_paper_policy_cuts_after_external_consumers():
    graph = GRAPHS[(14, 1)]
    layers = [l.name for l in graph.layers]
    half = len(layers) // 2
    assignment = {l: ("A" if i < half else "B") for i, l in enumerate(layers)}
    app = cnn_to_csdf(graph, assignment, "paper")
    for p in app.phases["A"]:
        for l in p.layers[:-1]:
            assert all(assignment[s] == "A" for s in graph.succs[l])


def test_single_actor_contiguous_stages():
    graph = GRAPHS[(25, 2)]
    app = cnn_to_csdf(graph, {l.name: "cpu" for l in graph.layers}, "maximal")
    assert len(app.phases["cpu"]) == 1 and not app.channels


def test_unmapped_layer_is_an_error():
    graph = GRAPHS[(6, 0)]
    with pytest.raises(InputError, match="unmapped"):
        cnn_to_csdf(graph, {})


def test_sdf_is_algorithm_1():
    graph = GRAPHS[(14, 3)]
    sdf = cnn_to_sdf(graph)
    assert len(sdf.actors) == len(graph.layers) and len(sdf.channels) == len(graph.edges)
    for c in sdf.channels:
        assert c.production == c.consumption == [graph.tensors[c.attrs["tensor"]].elements]
    sdf.validate()


def test_app_round_trips_through_json():
    graph = GRAPHS[(25, 4)]
    assignment = {l.name: f"pe{i % 3}" for i, l in enumerate(graph.layers)}
    app = cnn_to_csdf(graph, assignment)
    from hetflow.dataflow.csdf import CsdfApp

    assert CsdfApp.from_dict(app.to_dict()) == app
