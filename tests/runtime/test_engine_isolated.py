"""Elements in processes of their own inside one run: outputs still equal the reference frame by
frame and in order, for random CNN DAGs, random mappings and any set of isolated elements
(replica groups and several phases per element included); an isolated element whose process
dies stops the run with an error naming it; no process is left behind."""
import threading

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hetflow.errors import RuntimeFault
from hetflow.mapping.mapping import group_members
from hetflow.model.synthetic import random_cnn_graph
from hetflow.runtime.check import check_outputs
from hetflow.runtime.engine import prepare, run_prepared
from hetflow.runtime.inputs import random_source

GRAPHS = {s: random_cnn_graph(10, s) for s in range(3)}


def run_isolated(plan, graph, isolate, frames=11):
    pp = prepare(plan, graph, isolate=frozenset(isolate))
    hosts = {id(r.host): r.host for r in pp.runners.values() if hasattr(r, "host")}
    try:
        src = random_source(graph)
        report, kept, _ = run_prepared(pp, src, frames, warmup=1, keep_outputs=lambda f: True,
                                       stall_timeout=60)
    finally:
        pp.close()
    assert all(not h.process.is_alive() for h in hosts.values())
    assert len(hosts) == len(set(isolate))
    return report, check_outputs(graph, plan.app, kept, src), kept


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.sampled_from(sorted(GRAPHS)), data=st.data())
def test_isolated_elements_give_the_reference_outputs_in_order(plan_for, seed, data):
    graph = GRAPHS[seed]
    pool = data.draw(st.sampled_from([["pe0", "pe1"], ["pe0", "pe1", "pe2"], ["pe0|pe3", "pe1"]]))
    assignment = {l.name: data.draw(st.sampled_from(pool)) for l in graph.layers}
    plan = plan_for(graph, assignment)
    used = sorted({e for a in plan.app.phases for e in group_members(a)})
    isolate = data.draw(st.lists(st.sampled_from(used), min_size=1, unique=True))
    report, err, kept = run_isolated(plan, graph, isolate)
    assert report.frames == 11 and sorted(kept) == list(range(11))
    assert err < 1e-4


def test_a_dead_isolated_element_stops_the_run_naming_it(plan_for):
    graph = GRAPHS[0]
    names = [l.name for l in graph.layers]
    plan = plan_for(graph, {n: ("pe0" if i < 5 else "pe1") for i, n in enumerate(names)})
    pp = prepare(plan, graph, isolate=frozenset({"pe1"}))
    host = next(r.host for r in pp.runners.values() if hasattr(r, "host"))
    killer = threading.Timer(0.5, host.process.kill)
    try:
        killer.start()
        with pytest.raises(RuntimeFault, match="pe1"):
            run_prepared(pp, random_source(graph), 10 ** 6, stall_timeout=30)
    finally:
        killer.cancel()
        pp.close()
    assert not host.process.is_alive()
