import pytest

from hetflow.mapping.planner import search_candidates


def _problem():
    import numpy as np

    from hetflow.mapping.problem import Problem
    from hetflow.model.synthetic import random_cnn_graph
    from hetflow.platform.spec import ProcessingElement

    graph = random_cnn_graph(8, 1)
    els = [ProcessingElement(f"cpu{i}", "cpu", (i,)) for i in range(3)]
    els.append(ProcessingElement("gpu0", "gpu", (3,), model="g"))
    rng = np.random.default_rng(0)
    times = rng.uniform(1e-3, 4e-3, (len(graph.layers), 1)) * np.array([[1, 1, 1, 0.1]])
    return Problem(graph, els, times, lambda nbytes, a, b: 0.0 if a == b else 1e-4)


def test_candidates_are_the_best_predicted_and_every_strategy_pick():
    problem = _problem()
    both = ["single", "pipeline"]
    cands = search_candidates(problem, both, "p", 2)
    preds = [p.predicted["throughput"] for p, _ in cands]
    keys = [p.mapping.key() for p, _ in cands]
    assert len(set(keys)) == len(keys) and 2 <= len(cands) <= 4
    assert preds[:2] == sorted(preds[:2], reverse=True)
    picks = []
    for strategy in both:  # each strategy's own pick is among them
        own = search_candidates(problem, [strategy], "p", 1)
        assert len(own) == 1 and own[0][0].mapping.key() in keys
        picks.append(own[0][0].predicted["throughput"])
    # one candidate: the best prediction over all strategies, as without pilots
    best = search_candidates(problem, both, "p", 1)
    assert len(best) == 1 and best[0][0].predicted["throughput"] == max(picks)
    # a latency cap holds for every candidate
    cap = sorted(p.predicted["latency"] for p, _ in cands)[0] * 1.01
    for plan, _ in search_candidates(problem, both, "p", 2, options={"latency_cap": cap}):
        assert plan.predicted["latency"] <= cap


def test_one_strategy_says_why_it_found_nothing():
    import pytest

    from hetflow.errors import InfeasibleError

    problem = _problem()
    with pytest.raises(InfeasibleError, match="latency cap"):
        search_candidates(problem, ["single"], "p", 3, options={"latency_cap": 1e-9})
    said = []
    assert search_candidates(problem, ["single", "pipeline"], "p", 3,
                             options={"latency_cap": 1e-9}, log=said.append) == []
    assert len(said) == 2 and all("latency cap" in s for s in said)



def test_the_whole_model_on_the_best_element_is_always_a_candidate():
    """However the strategies' fronts look, the whole model on the element analysed fastest is
    piloted beside them (a measured run, not the analysis, decides between them)."""
    from hetflow.mapping.planner import best_whole_model
    from hetflow.mapping.problem import evaluate
    from hetflow.mapping.strategies.base import whole_model_on

    problem = _problem()
    want, metrics = best_whole_model(problem)
    assert len(set(want.assignment.values())) == 1
    rates = [evaluate(problem, whole_model_on(problem, e.name)).throughput
             for e in problem.elements]
    assert metrics.throughput == max(rates)  # the fastest single element (here the GPU)
    assert want.actors == ["gpu0"]
    for strategies in (["pipeline"], ["single"], ["single", "pipeline"]):
        keys = [p.mapping.key() for p, _ in search_candidates(problem, strategies, "p", 2)]
        assert want.key() in keys, strategies


def test_under_a_latency_cap_the_designs_with_room_come_fastest_first():
    """The designs predicted within half the cap, over every strategy's front, fastest first:
    the first not piloted already joins the candidates (a p99 measured is often well above the
    latency predicted)."""
    from types import SimpleNamespace as NS

    from hetflow.mapping.planner import ROOMY_SHARE, _roomy_designs

    def design(name, fps, ms, stages=1):
        return (NS(name=name, actors=[f"s{i}" for i in range(stages)]),
                NS(throughput=fps, latency=ms / 1e3))

    a = NS(front=[design("a-near", 1000, 9.5), design("a-room", 900, 4.0),
                  design("a-tiny", 500, 1.0), design("a-pipeline", 990, 2.0, stages=2)])
    b = NS(front=[design("b-room", 950, 4.9), design("b-over", 2000, 20.0)])
    found = [(1000, 0, NS(name="pa"), a), (990, 1, NS(name="pa2"), a),
             (980, 2, NS(name="pb"), b)]
    got = _roomy_designs(found, 10e-3)
    assert ROOMY_SHARE == 0.5
    # data-parallel designs only (pipelines predicted low in latency are candidates anyway)
    assert [(mp.name, plan.name) for (mp, _), plan, _ in got] == [
        ("b-room", "pb"), ("a-room", "pa"), ("a-tiny", "pa")]
    assert _roomy_designs(found, None) == [] and _roomy_designs(found, 1e-3) == []
    # a floor on the predicted rate: a design with room must not give the rate up
    assert [mp.name for (mp, _), _, _ in _roomy_designs(found, 10e-3, 900)] == ["b-room", "a-room"]


def test_a_design_with_room_not_piloted_already_joins_the_candidates(monkeypatch):
    """The first design with room (fastest first) that is not a candidate already joins them;
    one that is, is not piloted twice."""
    from hetflow.mapping import planner
    from hetflow.mapping.strategies.base import get_strategy

    problem = _problem()
    cap = 12e-3
    plain = search_candidates(problem, ["pipeline"], "p", 2, options={"latency_cap": cap})
    keys = [p.mapping.key() for p, _ in plain]
    result = get_strategy("pipeline")(problem, latency_cap=cap)
    taken = next((mp, m) for mp, m in result.front if mp.key() in keys)
    fresh = [(mp, m) for mp, m in result.front if mp.key() not in keys and m.latency <= cap]
    offered = [(taken, plain[0][0], result)] + [(d, plain[0][0], result) for d in fresh[:2]]
    monkeypatch.setattr(planner, "_roomy_designs", lambda found, cap, floor=0.0: offered)
    got = [p.mapping.key() for p, _ in
           search_candidates(problem, ["pipeline"], "p", 2, options={"latency_cap": cap})]
    assert got == keys + [fresh[0][0].key()]


def test_the_parallel_copies_design_is_always_a_candidate():
    """The whole model on every element of the finest configuration, weighted by speed: the
    design the parallel-copies baseline runs, piloted beside the strategies' own."""
    from hetflow.mapping.planner import copies_design, is_copies_design

    problem = _problem()
    mapping, metrics = copies_design(problem)
    assert mapping.actors == ["cpu0|cpu1|cpu2|gpu0"] and is_copies_design(problem, mapping)
    assert metrics.throughput > 0
    shares = [mapping.dispatch[mapping.actors[0]].count(m) for m in range(4)]
    assert shares[3] > max(shares[:3])  # the GPU (10x faster here) takes the most frames
    for strategies in (["pipeline"], ["single"], ["single", "pipeline"]):
        cands = search_candidates(problem, strategies, "p", 2)
        assert sum(is_copies_design(problem, p.mapping) for p, _ in cands) == 1, strategies
    assert not any(is_copies_design(problem, p.mapping)
                   for p, _ in search_candidates(problem, ["pipeline"], "p", 1))
    # a one-element configuration has no copies design
    from dataclasses import replace

    alone = replace(problem, configurations=[["gpu0"]])
    assert copies_design(alone) is None and not is_copies_design(alone, mapping)



def test_the_copies_design_is_on_the_configuration_with_most_elements_in_any_order():
    """A platform's own configurations come in its order (the 2-core VM lists the two-core
    group first): the copies' design is still the one over the most elements."""
    from dataclasses import replace

    from hetflow.mapping.planner import copies_design, is_copies_design

    problem = replace(_problem(), configurations=[["gpu0"], ["cpu0", "cpu1", "cpu2", "gpu0"],
                                                  ["cpu0", "gpu0"]])
    mapping, _ = copies_design(problem)
    assert mapping.actors == ["cpu0|cpu1|cpu2|gpu0"] and is_copies_design(problem, mapping)


def test_under_a_rate_floor_a_laned_candidate_is_offered_at_the_fewest_lanes_above_it():
    """A latency-capped plan that must keep a rate: the GPU alone at its best lane count and at
    the fewest lanes predicted LEAN_MARGIN above the floor, each a candidate; without a floor
    only the first."""
    from hetflow.mapping.planner import LEAN_MARGIN
    from hetflow.mapping.problem import evaluate
    from hetflow.plan.mapping import Mapping

    problem = _problem()
    problem.lane_slowdown["gpu0"] = {1: 1.0, 2: 1.1, 4: 1.5, 8: 2.4, 16: 4.4}
    whole = {l.name: "gpu0" for l in problem.graph.layers}
    rates = {k: evaluate(problem, Mapping(whole, lanes={"gpu0": k})).throughput
             for k in problem.lane_counts("gpu0")}
    floor = rates[4] / LEAN_MARGIN * 0.99  # 4 lanes are the fewest above LEAN_MARGIN x floor
    assert rates[2] < LEAN_MARGIN * floor <= rates[4] < rates[16]
    cap = 1.0

    def gpu_alone(cands):
        return sorted(p.mapping.lanes["gpu0"] for p, _ in cands if p.mapping.actors == ["gpu0"])

    plain = search_candidates(problem, ["single", "pipeline"], "p", 2,
                              options={"latency_cap": cap})
    assert gpu_alone(plain) == [16]
    lean = search_candidates(problem, ["single", "pipeline"], "p", 2,
                             options={"latency_cap": cap}, rate_floor=floor)
    assert gpu_alone(lean) == [4, 16]
    keys = [p.mapping.key() for p, _ in lean]
    assert len(keys) == len(set(keys))
    for plan, _ in lean:
        assert plan.predicted["latency"] <= cap


def test_the_gpu_alone_at_a_count_a_longer_run_measured_is_a_candidate():
    """The bench's baseline ran the GPU alone at 16 lanes well below the lane table: 8 lanes,
    read by the table alone, now look best, and the 16 lanes that run measured are piloted
    beside them."""
    from hetflow.mapping.calibration import alone_lane_slowdown
    from hetflow.plan.mapping import Mapping
    from hetflow.mapping.planner import measured_whole_models
    from hetflow.mapping.problem import evaluate

    problem = _problem()
    problem.lane_slowdown["gpu0"] = {1: 1.0, 2: 1.1, 4: 1.5, 8: 2.4, 16: 4.4}
    whole = {l.name: "gpu0" for l in problem.graph.layers}
    rate16 = evaluate(problem, Mapping(whole, lanes={"gpu0": 16})).throughput
    assert problem.best_lanes("gpu0", busy=False) == 16
    problem.lane_alone_runs["gpu0"] = {16: alone_lane_slowdown(problem, "gpu0", 16, 0.7 * rate16)}
    assert problem.best_lanes("gpu0", busy=False) == 8
    (m, metrics), = measured_whole_models(problem)
    assert m.lanes == {"gpu0": 16} and metrics.throughput == pytest.approx(0.7 * rate16, rel=0.01)
    assert measured_whole_models(problem, latency_cap=metrics.latency * 0.5) == []
    alone = sorted(p.mapping.lanes["gpu0"] for p, _ in search_candidates(
        problem, ["single", "pipeline"], "p", 2) if p.mapping.actors == ["gpu0"])
    assert alone == [8, 16]
