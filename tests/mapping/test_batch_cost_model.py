"""Batches as SDF rates in the cost model: a batched element fires on b frames (rate b on its
channels, its neighbours fire b times a firing) taking the profile's t(b, k); b = 1 is the
model without batches; a whole-model batched GPU copy runs k * b / t(b, k) frames/s; at a low
rate a frame pays for the batch's run and its fill."""
import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings, strategies as st

from hetflow.errors import DeadlockError, InputError
from hetflow.mapping.from_profile import batch_curves, with_batches
from hetflow.mapping.lanes import check_lanes, fit_lanes
from hetflow.dataflow.analysis import (
    check_liveness,
    repetition_vector,
    throughput_mcr,
    throughput_simulation,
)
from hetflow.mapping.problem import (
    actor_batches,
    batch_fill,
    build_app,
    evaluate,
    batched_takers,
    frame_parts,
    latency_at_rate,
    saturated_latency,
    timed_graph,
)
from hetflow.plan.mapping import Mapping, group_name

BATCHES = (1, 2, 4, 8, 16, 32)
LANES = (1, 2, 4, 8)


def batch_table(t1: float, lane_slowdown: dict[int, float], affine: float,
                busy: float | None = None) -> dict:
    """A profile's gpu_batches table: a firing of b frames at k lanes takes
    t1 * slowdown(k) * (affine + (1 - affine) * b) (affine 1: a batch costs one frame's run,
    0: b runs), beside busy copies `busy` times that."""
    out = {}
    for k, s in lane_slowdown.items():
        for b in BATCHES:
            t = t1 * s * (affine + (1 - affine) * b)
            out[f"{b},{k}"] = {"alone": {"median": t}, "memory_bytes": 1 << 20,
                               **({"busy": {"median": t * busy}} if busy else {})}
    return out


def whole(p, actor):
    return Mapping({l.name: actor for l in p.graph.layers})


def gpu_time(p):
    return p.actor_time([l.name for l in p.graph.layers], "gpu0")


def batched_problem(factory, seed=0, n_cpu=2, affine=0.8, curve=None, busy=None,
                    call_overhead=0.0):
    curve = curve or {1: 1.0, 2: 1.3, 4: 2.0, 8: 3.6}
    p = factory.problem(6, factory.elements(n_cpu, 1), seed=seed, call_overhead=call_overhead)
    p = dataclasses.replace(p, lane_slowdown={"gpu0": dict(curve)})
    return with_batches(p, {"gpu0": batch_table(gpu_time(p), curve, affine, busy)})


def test_the_profile_table_becomes_ratios_to_one_frame_at_the_same_lanes(factory):
    table = batch_table(2e-3, {1: 1.0, 4: 2.0}, 0.5, busy=1.5)
    alone, busy = batch_curves(table)
    assert alone[4][1] == 1.0 and alone[4][8] == pytest.approx(0.5 + 0.5 * 8)
    assert busy[1][32] == pytest.approx(alone[1][32])  # busy times scale every b alike
    p = factory.problem(4, factory.elements(1, 1))
    q = with_batches(p, {"gpu0": table})
    assert p.batch_slowdown == {} and q.batch_slowdown["gpu0"] == alone  # a new Problem
    assert q.batch_sizes("gpu0") == list(BATCHES) and q.batch_sizes("cpu0") == [1]
    # where the table has the lanes' frames/s, a firing is k * b over it (stalls included)
    table["8,4"]["alone_fps"] = 4 * 8 / (2e-3 * 2.0 * 9)  # 2x the median's firing
    assert batch_curves(table)[0][4][8] == pytest.approx(9.0)


def test_batch_factor_interpolates_between_batches_and_refuses_outside(factory):
    p = batched_problem(factory, affine=0.5)
    assert p.batch_factor("gpu0", 8, 4, busy=False) == pytest.approx(4.5)
    assert p.batch_factor("gpu0", 6, 4, busy=False) == pytest.approx(3.5)  # between 4 and 8
    assert p.batch_factor("gpu0", 8, 3, busy=False) == pytest.approx(4.5)  # between lanes
    with pytest.raises(InputError, match="element 'gpu0': batch 64 is outside"):
        p.batch_factor("gpu0", 64, 1, busy=False)


@pytest.mark.parametrize("mapping, says", [
    (Mapping({}, batch={"gpu0": 6}), "element 'gpu0': batch 6 was not measured by its profile "
                                     r"\(measured: 1, 2, 4, 8, 16, 32\)"),
    (Mapping({}, batch={"cpu0": 2}), "element 'cpu0': batch 2 asked for, but its profile has no "
                                     "batch table"),
])
def test_a_batch_the_profile_did_not_measure_is_refused(factory, mapping, says):
    p = batched_problem(factory)
    m = dataclasses.replace(mapping, assignment={l.name: next(iter(mapping.batch))
                                                 for l in p.graph.layers})
    with pytest.raises(InputError, match=says):
        evaluate(p, m)
    with pytest.raises(InputError, match=says):
        check_lanes(p, m)


def random_mapping(draw, p):
    """A random pipeline or data-parallel design over the problem's elements (stages in layer
    order, each one element or a group of CPU cores)."""
    names = [e.name for e in p.elements]
    layers = [l.name for l in p.graph.layers]
    actors = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
    cpus = [n for n in names if n.startswith("cpu") and n not in actors]
    if len(cpus) > 1 and draw(st.booleans()):
        actors.append(group_name(cpus))
    cuts = sorted(draw(st.lists(st.integers(1, len(layers) - 1), max_size=len(actors) - 1,
                                unique=True)))
    bounds = [0, *cuts, len(layers)]
    return Mapping({l: actors[i] for i in range(len(bounds) - 1)
                    for l in layers[bounds[i]:bounds[i + 1]]},
                   dispatch_mode=draw(st.sampled_from(["dynamic", "static"])))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 300), data=st.data())
def test_batch_one_is_the_model_without_batches(factory, seed, data):
    plain = factory.problem(6, factory.elements(3, 1), seed=seed)
    plain = dataclasses.replace(plain, lane_slowdown={"gpu0": {1: 1.0, 2: 1.4, 4: 2.4}})
    tables = {e.name: batch_table(0.01, {1: 1.0, 2: 1.4}, 0.7) for e in plain.elements}
    batched = with_batches(plain, tables)
    m = random_mapping(data.draw, plain)
    ones = dataclasses.replace(m, batch={e: 1 for e in m.elements})
    a, b = evaluate(plain, m), evaluate(batched, ones)
    assert a.to_dict() == b.to_dict()
    assert saturated_latency(plain, m) == saturated_latency(batched, ones) or \
        (math.isnan(saturated_latency(plain, m)) and math.isnan(saturated_latency(batched, ones)))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 300), k=st.sampled_from(LANES), b=st.sampled_from(BATCHES),
       affine=st.floats(0.0, 1.0), overhead=st.floats(0.0, 1e-4),
       curve=st.lists(st.floats(1.0, 2.0), min_size=3, max_size=3))
def test_a_batched_whole_model_gpu_copy_runs_k_b_over_its_firing(factory, seed, k, b, affine,
                                                                 overhead, curve):
    slow = {1: 1.0, 2: curve[0], 4: curve[0] * curve[1], 8: curve[0] * curve[1] * curve[2]}
    p = batched_problem(factory, seed, affine=affine, curve=slow, call_overhead=overhead)
    m = dataclasses.replace(whole(p, "gpu0"), lanes={"gpu0": k}, batch={"gpu0": b})
    t_bk = gpu_time(p) * slow[k] * (affine + (1 - affine) * b)  # the table's t(b, k)
    metrics = evaluate(p, m)
    assert metrics.throughput == pytest.approx(k * b / (t_bk + overhead), rel=1e-6)
    assert metrics.batch == ({"gpu0": b} if b > 1 else {})
    # the saturated latency: a full batch runs, after its b frames came in at that rate
    assert metrics.latency >= t_bk + (b - 1) / metrics.throughput - 1e-12


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 300), data=st.data(), wait=st.sampled_from([0.0, 1e-3, 1.0]),
       affine=st.floats(0.0, 0.95))
def test_latency_at_a_low_rate_grows_with_the_batch(factory, seed, data, wait, affine):
    p = batched_problem(factory, seed, n_cpu=2, affine=affine, call_overhead=30e-6)
    m = random_mapping(data.draw, p)
    # the GPU runs the first stage (swapping actors) and every layer that reads a model input,
    # so every frame's path goes through it
    first = m.assignment[p.graph.layers[0].name]
    swap = {first: "gpu0", "gpu0": first}
    fed = {l.name for l in p.graph.layers if set(l.inputs) & set(p.graph.inputs)}
    m = dataclasses.replace(m, assignment={l: "gpu0" if l in fed else swap.get(a, a)
                                           for l, a in m.assignment.items()})
    # a rate each batch size takes frame by frame: a batch of b frames costs at most b runs,
    # so a frame alone takes at most 32 times its time unbatched
    rate = 0.1 / (BATCHES[-1] * evaluate(p, m).latency_isolated)
    lat = [latency_at_rate(p, dataclasses.replace(m, batch={"gpu0": b},
                                                  batch_wait={"gpu0": wait}), rate)
           for b in BATCHES]
    assert all(np.isfinite(lat))
    assert all(x < y for x, y in zip(lat, lat[1:]))
    if wait > 0:  # each frame waits for its batch: up to the wait, the others' arrival
        fills = [min(wait, (b - 1) / rate) for b in BATCHES]
        assert all(y - x >= f - g - 1e-12 for x, y, g, f in zip(lat, lat[1:], fills, fills[1:]))


def test_a_batched_gpu_feeds_its_neighbours_b_frames_a_firing(factory):
    p = batched_problem(factory, affine=0.3)
    layers = [l.name for l in p.graph.layers]
    m = Mapping({l: ("cpu0" if i < 2 else "gpu0") for i, l in enumerate(layers)},
                lanes={"gpu0": 1}, batch={"gpu0": 8})
    metrics = evaluate(p, m)
    # the CPU stage fires once a frame, the GPU once every 8: the slower of the two sets the rate
    cpu = sum(p.actor_time(layers[:2], "cpu0") for _ in [0]) + p.call_overhead
    gpu = p.actor_time(layers[2:], "gpu0") * p.batch_factor("gpu0", 8, 1, True) + p.call_overhead
    assert metrics.throughput <= min(1 / cpu, 8 / gpu) * (1 + 1e-9)
    assert metrics.throughput == pytest.approx(min(1 / cpu, 8 / gpu), rel=0.2)


def test_fit_lanes_batches_where_batching_pays(factory):
    p = batched_problem(factory, affine=0.8)
    fitted, metrics = fit_lanes(p, whole(p, "gpu0"))
    assert fitted.batch_of("gpu0") > 1 and metrics.batch == fitted.batch
    linear = batched_problem(factory, affine=0.0)  # b frames cost b runs: nothing gained
    fitted, _ = fit_lanes(linear, whole(linear, "gpu0"))
    assert fitted.batch_of("gpu0") == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 300), data=st.data(), b=st.sampled_from(BATCHES[1:]),
       k=st.sampled_from(LANES))
def test_the_multi_rate_graph_fires_neighbours_b_times_and_both_analyses_agree(factory, seed,
                                                                               data, b, k):
    p = batched_problem(factory, seed, n_cpu=3, affine=0.5, call_overhead=30e-6)
    m = random_mapping(data.draw, p)
    if "gpu0" not in m.elements:
        m = dataclasses.replace(m, assignment={**m.assignment, p.graph.layers[-1].name: "gpu0"})
    m = dataclasses.replace(m, lanes={"gpu0": k}, batch={"gpu0": b})
    app = build_app(p, m)
    g = timed_graph(p, app, m)
    try:  # a batch in a round trip may wait for frames it cannot get (the test below)
        check_liveness(g)
    except DeadlockError:
        assume(False)
    rates = actor_batches(p, m, app)
    assert rates == {"gpu0": b}
    parts = frame_parts(g, rates)
    assert sorted(a.name for sub, _ in parts for a in sub.actors) == sorted(app.phases)
    for sub, frames in parts:
        q = repetition_vector(sub)
        # every actor's firings in a part's iteration carry the same frames: lcm / its batch
        assert {q[a.name] * rates.get(a.name, 1) for a in sub.actors} == {frames}
        mcr = throughput_mcr(sub).throughput
        assert mcr == pytest.approx(throughput_simulation(sub).throughput, rel=1e-6)
        if "gpu0" in q:
            assert q["gpu0"] == 1 and all(q[a] == b for a in q if a != "gpu0")
    rate = min(throughput_mcr(sub).throughput * f for sub, f in parts)
    metrics = evaluate(p, m)
    assert metrics.throughput == pytest.approx(rate, rel=1e-9)
    # fed flat out or paced at its rate, a frame takes at least its batch's run, and both
    # latency analyses of the multi-rate graph find a periodic regime
    run = max(a.exec_times[0] for a in g.actors if a.name == "gpu0")
    assert run <= saturated_latency(p, m) < math.inf and run <= metrics.latency < math.inf


def test_fit_lanes_batches_a_gpu_pipeline_stage_that_limits_the_rate(factory):
    p = batched_problem(factory, affine=0.8, call_overhead=30e-6)
    times = p.layer_times.copy()
    times[:, p.element_index["cpu0"]] /= 100  # the CPU stage far faster than the GPU's
    p = dataclasses.replace(p, layer_times=times)
    layers = [l.name for l in p.graph.layers]
    m = Mapping({l: "cpu0" if i == 0 else "gpu0" for i, l in enumerate(layers)})
    plain, _ = fit_lanes(p, dataclasses.replace(m, batch={"gpu0": 1}))
    fitted, metrics = fit_lanes(p, m)
    assert fitted.batch_of("gpu0") > 1
    assert metrics.throughput > 1.5 * evaluate(p, plain).throughput


def test_a_batch_in_a_round_trip_that_cannot_fill_is_not_chosen(factory):
    p = batched_problem(factory, seed=35, affine=0.9)  # batching would pay, were it live
    graph = p.graph
    fed = {l.name for l in graph.layers if set(l.inputs) & set(graph.inputs)}
    # the GPU runs the layers that read the input; the core the rest, which hands a tensor back
    m = Mapping({l.name: "gpu0" if l.name in fed or i == 0 else "cpu1"
                 for i, l in enumerate(graph.layers)})
    with pytest.raises(DeadlockError, match="actor 'gpu0' waits for tokens"):
        evaluate(p, dataclasses.replace(m, batch={"gpu0": 8}))
    fitted, metrics = fit_lanes(p, m)
    assert fitted.batch_of("gpu0") == 1 and metrics.batch == {}


def simulated_batches(batch: int, wait: float, rate: float, frames: int) -> list[list[float]]:
    """Each batch's frames' waits for it, frames arriving every 1 / rate s: a batch opens with
    the first frame not yet taken and fires once it holds `batch` frames or its first frame
    has waited `wait` s, with the frames come by then."""
    arrivals = [i / rate for i in range(frames)]
    out, i = [], 0
    while i < frames:
        fire = min(arrivals[i] + wait, arrivals[min(i + batch - 1, frames - 1)])
        taken = [t for t in arrivals[i:i + batch] if t <= fire + 1e-12]
        out.append([fire - t for t in taken])
        i += len(taken)
    return out


@given(b=st.integers(2, 32), wait=st.floats(0.0, 0.05), rate=st.floats(10.0, 20000.0))
def test_a_frames_wait_for_its_batch_is_that_of_a_simulated_clock(b, wait, rate):
    m = Mapping({"l": "gpu0"}, batch={"gpu0": b}, batch_wait={"gpu0": wait})
    batches = simulated_batches(b, wait, rate, frames=10 * b)[:-1]  # the last: the stream's end
    assert batches and all(len(x) == len(batches[0]) for x in batches)  # on a clock, alike
    # the first frame of a batch waits longest; the median frame as numpy's median of a batch
    assert batch_fill(m, "gpu0", rate) == pytest.approx(max(batches[0]), rel=1e-6, abs=1e-9)
    assert batch_fill(m, "gpu0", rate, median=True) == pytest.approx(
        float(np.median(batches[0])), rel=1e-6, abs=1e-9)


def test_latency_at_a_rate_above_what_the_plan_takes_is_unbounded(factory):
    p = batched_problem(factory, 0, affine=0.5)
    m = dataclasses.replace(whole(p, "gpu0"), lanes={"gpu0": 2}, batch={"gpu0": 8},
                            batch_wait={"gpu0": 1e-3})
    full = evaluate(p, m).throughput  # frames/s with full batches: 2 * 8 / t(8, 2)
    alone = full / 8  # each frame fired alone, padded
    assert math.isfinite(latency_at_rate(p, m, 0.5 * alone))
    assert latency_at_rate(p, m, 4 * full) == math.inf


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 300), b=st.sampled_from(BATCHES), k=st.sampled_from(LANES[1:]),
       wait=st.sampled_from([1e-3, 4e-3]), log_rate=st.floats(1.0, 5.0),
       per_byte=st.sampled_from([0.0, 1e-10]))
def test_at_a_rate_one_lane_keeps_up_with_more_lanes_change_nothing(factory, seed, b, k, wait,
                                                                     log_rate, per_byte):
    p = batched_problem(factory, seed, affine=0.3)
    p = dataclasses.replace(p, host_per_byte={"gpu0": per_byte})
    one = dataclasses.replace(whole(p, "gpu0"), lanes={"gpu0": 1}, batch={"gpu0": b},
                              batch_wait={"gpu0": wait})
    rate = 10.0 ** log_rate
    # a firing of the n frames that come within the wait, padded to b, on one lane, after
    # their staging; frames at a rate whose firings keep one lane busy at most 95% of the time
    n = min(b, math.floor(wait * rate + 1e-9) + 1)
    borders = sum(p.graph.tensors[t].nbytes for t in (*p.graph.inputs, *p.graph.outputs))
    firing = gpu_time(p) * (0.3 + 0.7 * b if b > 1 else 1.0) + per_byte * n * borders * (b > 1)
    assume(rate / n * firing <= 0.95)
    # the other lanes idle, so a firing runs as on one lane (the curve's slowdown at k is for
    # k busy at once)
    many = dataclasses.replace(one, lanes={"gpu0": k})
    assert latency_at_rate(p, many, rate, median=True) == pytest.approx(
        latency_at_rate(p, one, rate, median=True), rel=1e-9)
    if b > 1:  # its frames are staged one by one before it runs: n frames' borders
        cold = dataclasses.replace(p, host_per_byte={"gpu0": 0.0})
        assert latency_at_rate(p, one, rate, median=True) - latency_at_rate(
            cold, one, rate, median=True) == pytest.approx(per_byte * n * borders, abs=1e-12)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(b=st.sampled_from([1, 2, 4, 8, 16, 32]), k=st.sampled_from([2, 4, 8]),
       helpers=st.integers(0, 3))
def test_staging_cores_divide_a_host_bound_batchs_copies_by_its_row_split(factory, b, k,
                                                                          helpers):
    """A GPU whose frames' copies dwarf its device time, at k > 1 lanes (one lane of the whole
    model was timed with its copies in it): its rate is bound by the driving thread, which stages its share of each batch's rows (backends.staging.row_chunks) while
    the element's other cores stage the rest, so the rate rises by exactly that split; one
    frame a firing is staged by the driving thread alone."""
    from hetflow.backends.staging import row_chunks

    p = batched_problem(factory)
    nbytes = sum(p.graph.tensors[t].nbytes for t in (*p.graph.inputs, *p.graph.outputs))

    def rate(cores):
        gpu = dataclasses.replace(p.element("gpu0"), cores=cores)
        q = dataclasses.replace(p, elements=[gpu if e.name == "gpu0" else e for e in p.elements],
                                host_time={"gpu0": {1: 0.0}},
                                host_per_byte={"gpu0": 1e3 * gpu_time(p) / nbytes})
        m = whole(q, "gpu0")
        m.lanes, m.batch = {"gpu0": k}, {"gpu0": b}
        return evaluate(q, m).throughput

    alone = rate((90,))
    assert alone == pytest.approx(1 / (1e3 * gpu_time(p)), rel=1e-6)  # the driver's copies
    assert rate((90, *range(91, 91 + helpers))) / alone == pytest.approx(
        len(row_chunks(b, 1 + helpers)), rel=1e-6)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(b=st.sampled_from([1, 2, 4, 8, 16, 32]), helpers=st.integers(0, 3),
       floor=st.floats(0.0, 3.0))
def test_staging_is_never_faster_than_all_its_threads_were_seen_to_stage(factory, b, helpers,
                                                                          floor):
    """The row split is bounded by the stager's measured wall time a byte (`floor` x one
    thread's cost over the threads of a full batch): a host-bound GPU's rate is the lower of
    the split and that bound, and no floor leaves the split as it was."""
    from hetflow.backends.staging import row_chunks

    p = batched_problem(factory)
    nbytes = sum(p.graph.tensors[t].nbytes for t in (*p.graph.inputs, *p.graph.outputs))
    per_byte = 1e3 * gpu_time(p) / nbytes
    cores = (90, *range(91, 91 + helpers))
    full = len(row_chunks(32, len(cores)))
    gpu = dataclasses.replace(p.element("gpu0"), cores=cores)
    q = dataclasses.replace(p, elements=[gpu if e.name == "gpu0" else e for e in p.elements],
                            host_time={"gpu0": {1: 0.0}}, host_per_byte={"gpu0": per_byte},
                            host_staged_per_byte={"gpu0": floor * per_byte / full})
    split = per_byte * nbytes / len(row_chunks(b, len(cores)))
    assert q.staging_seconds("gpu0", nbytes, b) == pytest.approx(
        max(split, floor * per_byte * nbytes / full), rel=1e-9)
    m = whole(q, "gpu0")
    m.lanes, m.batch = {"gpu0": 4}, {"gpu0": b}
    assert evaluate(q, m).throughput == pytest.approx(
        1 / max(split, floor * per_byte * nbytes / full), rel=1e-6)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 200), b=st.sampled_from(BATCHES[1:]), k=st.sampled_from(LANES),
       n_cpu=st.integers(1, 3), share=st.floats(0.05, 0.9), median=st.booleans(),
       cpu_scale=st.sampled_from([0.01, 1.0, 100.0]))
def test_at_a_rate_a_group_s_batched_member_takes_its_frames_while_it_keeps_up(
        factory, seed, b, k, n_cpu, share, median, cpu_scale):
    """Under the dynamic dispatch a batched member's lanes take the frames their batch lacks
    in one block as they start gathering (`Dispatch.take_block`): at a rate that member keeps
    up with alone, the group's latency is the member's where every other member's frame is
    through before a batch's first frame would be on it; frames leave in order, so a slower
    member's frames hold back those after them, and the group is never read faster than its
    batched member alone."""
    p = batched_problem(factory, seed, n_cpu=n_cpu, affine=0.3)
    cpus = [p.element_index[f"cpu{i}"] for i in range(n_cpu)]
    times = p.layer_times.copy()
    times[:, cpus] *= cpu_scale
    p = dataclasses.replace(p, layer_times=times)
    members = [f"cpu{i}" for i in range(n_cpu)] + ["gpu0"]
    group = whole(p, group_name(members))
    group.lanes, group.batch, group.batch_wait = {"gpu0": k}, {"gpu0": b}, {"gpu0": 2e-3}
    alone, takers = batched_takers(group)
    assert alone.actors == ["gpu0"] and alone.batch == group.batch and alone.lanes == group.lanes
    assert takers == {group.actors[0]: "gpu0"}
    rate = share * evaluate(p, alone).throughput
    expected = latency_at_rate(p, alone, rate, median)
    assume(math.isfinite(expected))
    first = latency_at_rate(p, alone, rate)
    slowest = max(evaluate(p, whole(p, f"cpu{i}")).latency_isolated for i in range(n_cpu))
    got = latency_at_rate(p, group, rate, median)
    event("the other members faster" if slowest <= first else "a slower member")
    if slowest <= first:
        assert got == expected
    else:
        assert got >= expected * (1 - 1e-12)
    # by a static pattern each member takes its share whatever the rate: no such member
    assert batched_takers(dataclasses.replace(group, dispatch_mode="static")) is None
    # nor where no member batches, or two do (which of them takes a frame is not known)
    assert batched_takers(dataclasses.replace(group, batch={})) is None
    two = whole(p, group_name(["cpu0", "gpu0"]))
    two.batch = {"cpu0": 2, "gpu0": b}
    assert batched_takers(two) is None
