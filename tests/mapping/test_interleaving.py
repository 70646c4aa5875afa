"""Plans choose frame-interleaved phase orders where the analysis finds them faster."""
import pytest
from hypothesis import given, settings, strategies as st

from hetflow.errors import DeadlockError, InputError
from hetflow.plan.mapping import Mapping
from hetflow.plan.plan import Plan
from hetflow.mapping.planner import make_plan
from hetflow.mapping.problem import evaluate, timed_graph
from synthetic_server import load_bounds, synthetic_problem


SQUEEZENET = synthetic_problem("squeezenet1_0", gpu_speedup=5.0)  # estimated times, GPU 5x a core


@pytest.fixture(scope="module")
def round_trips():
    """squeezenet on a GPU 5x a core with every 6th layer sent to a core: the GPU's frames
    leave and come back many times."""
    problem = synthetic_problem("squeezenet1_0", gpu_speedup=5.0)
    layers = [l.name for l in problem.graph.layers]
    return problem, Mapping({l: "cpu1" if i % 6 == 3 else "gpu0" for i, l in enumerate(layers)})


def test_a_plan_interleaves_where_the_analysis_finds_it_faster(round_trips):
    problem, mapping = round_trips
    plain = evaluate(problem, mapping)
    plan = make_plan(problem, mapping, plain, "test", "synthetic")
    assert set(plan.mapping.interleave) == {"gpu0", "cpu1"}
    assert plan.predicted["throughput"] > 1.02 * plain.throughput
    # the plan's prediction is the cost model's for the interleaved mapping, and a frame now
    # spends more rounds in flight
    again = evaluate(problem, plan.mapping)
    assert plan.predicted["throughput"] == pytest.approx(again.throughput)
    assert again.latency > plain.latency
    # and with FIFOs as deep as the orders need, the busier element alone sets the period
    load, _ = load_bounds(timed_graph(problem, plan.app, plan.mapping))
    assert 1 / plan.predicted["throughput"] == pytest.approx(load, rel=1e-6)
    assert Plan.from_dict(plan.to_dict()).mapping.interleave == plan.mapping.interleave
    assert not make_plan(problem, mapping, plain, "test", "synthetic",
                         interleave=False).mapping.interleave


def test_a_latency_cap_keeps_frames_in_order(round_trips):
    problem, mapping = round_trips
    plain = evaluate(problem, mapping)
    plan = make_plan(problem, mapping, plain, "test", "synthetic", latency_cap=plain.latency * 1.01)
    assert not plan.mapping.interleave
    assert plan.predicted["throughput"] == pytest.approx(plain.throughput)


def test_edited_offsets_are_checked(round_trips):
    problem, mapping = round_trips
    plan = make_plan(problem, mapping, evaluate(problem, mapping), "test", "synthetic")
    d = plan.to_dict()
    d["mapping"]["interleave"]["gpu0"][0] += 100  # still never increasing: allowed
    Plan.from_dict(d)
    d["mapping"]["interleave"]["gpu0"][-1] = 1
    with pytest.raises(InputError, match="interleave 'gpu0'.*end at 0"):
        Plan.from_dict(d, "p.json")


def test_rounds_of_two_frames_win_where_they_cost_little_throughput_and_much_less_latency():
    # googlenet, GPU 20x a core, every 6th layer on a core: offsets reach 43.5 frames/s but
    # run 10 frames ahead (253 ms); phase p of two frames before phase p + 1 gives 41.5 at 48 ms
    problem = synthetic_problem("googlenet", gpu_speedup=20.0)
    layers = [l.name for l in problem.graph.layers]
    mapping = Mapping({l: "cpu1" if i % 6 == 3 else "gpu0" for i, l in enumerate(layers)})
    plain = evaluate(problem, mapping)
    plan = make_plan(problem, mapping, plain, "test", "synthetic")
    assert plan.mapping.round_frames == 2
    assert not any(any(o) for o in plan.mapping.interleave.values())
    assert plan.predicted["throughput"] > 1.05 * plain.throughput
    assert plan.predicted["latency"] < 2 * plain.latency
    back = Plan.from_dict(plan.to_dict())
    assert (back.mapping.round_frames, back.mapping.interleave) == (2, plan.mapping.interleave)
    assert evaluate(problem, back.mapping).throughput == pytest.approx(plan.predicted["throughput"])


def test_rounds_of_several_frames_need_an_interleaved_actor(round_trips):
    problem, mapping = round_trips
    plan = make_plan(problem, mapping, evaluate(problem, mapping), "test", "synthetic",
                     interleave=False)
    d = plan.to_dict()
    d["mapping"]["round_frames"] = 2
    with pytest.raises(InputError, match="round_frames 2: no actor interleaves"):
        Plan.from_dict(d, "p.json")


@settings(max_examples=15, deadline=None)
@given(data=st.data(), cap_share=st.sampled_from([None, 1.0, 1.5, 3.0]))
def test_a_plan_is_never_analysed_slower_than_frame_order_nor_over_its_cap(data, cap_share):
    problem = SQUEEZENET
    layers = [l.name for l in problem.graph.layers]
    mapping = Mapping({l: data.draw(st.sampled_from(["gpu0", "cpu0", "cpu1"])) for l in layers})
    plain = evaluate(problem, mapping)
    cap = None if cap_share is None else plain.latency * cap_share
    plan = make_plan(problem, mapping, plain, "test", "synthetic", latency_cap=cap)
    assert plan.predicted["throughput"] >= plain.throughput * (1 - 1e-9)
    if plan.mapping.interleave:
        assert plan.predicted["throughput"] > plain.throughput * 1.02
        if cap is not None:
            assert plan.predicted["latency"] <= cap
    again = evaluate(problem, plan.mapping)
    assert again.throughput == pytest.approx(plan.predicted["throughput"])


@settings(max_examples=15, deadline=None)
@given(data=st.data(), offset=st.integers(0, 2), rounds=st.sampled_from([1, 2, 4]))
def test_no_order_runs_faster_than_the_busiest_actor_allows(data, offset, rounds):
    # choose_interleave searches no orders where this ceiling leaves no room, so it must hold
    # for every order it could try
    from hetflow.dataflow.analysis.repetition import repetition_vector
    from hetflow.mapping.interleaving import UNBOUNDED_FRAMES, busiest_period
    from hetflow.mapping.problem import build_app

    problem = SQUEEZENET
    layers = [l.name for l in problem.graph.layers]
    mapping = Mapping({l: data.draw(st.sampled_from(["gpu0", "cpu0", "cpu1"])) for l in layers})
    app = build_app(problem, mapping)
    deep = timed_graph(problem, app, mapping, capacity_frames=UNBOUNDED_FRAMES)
    ceiling = 1 / busiest_period(deep, repetition_vector(deep))
    multi = [a for a, ps in app.phases.items() if len(ps) > 1]
    orders = {a: [offset * (len(app.phases[a]) - 1 - p) for p in range(len(app.phases[a]))]
              for a in multi}
    for m in (mapping, Mapping(mapping.assignment, interleave=orders,
                               round_frames=rounds) if multi else mapping):
        try:
            rate = evaluate(problem, m, with_latency=False).throughput
        except DeadlockError:  # an order that deadlocks is never chosen
            continue
        assert rate <= ceiling * (1 + 1e-9)
