"""Schedulability on task sets small enough to work out by hand (times in ms, as seconds x1e-3
would only add noise to the arithmetic: the functions are unit-free)."""
import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from hetflow.errors import InputError
from hetflow.multi.schedulability import (PENALTY, AppSchedule, Task, analyse, blocking, dbf,
                                          energy_rate, eq10_slack, eq11_slack, penalty, rbf,
                                          release_jitter, response_bound, task_wait, utilisation,
                                          worst_times)

from multi_helpers import chain


def two_on_gpu():
    """A (priority 1): 4 on the GPU every 10. B (priority 2): 3 on a CPU core, then 5 on the
    GPU, every 20."""
    a = chain("A", 10.0, 1, [("gpu", 4.0)])
    b = chain("B", 20.0, 2, [("cpu", 3.0), ("gpu", 5.0)])
    return a, b


def test_asap_alap_mobility_of_a_chain_with_a_transfer():
    app = chain("X", 10.0, 1, [("cpu", 2.0), ("gpu", 3.0), ("cpu", 1.0)], delays=[1.0, 0.0])
    assert list(app.asap) == [0.0, 3.0, 6.0]
    assert app.response_isolated == 7.0
    # tails: 5, 1, 0 -> ALAP = 10 - C - tail
    assert list(app.alap()) == [3.0, 6.0, 9.0]
    assert list(app.mobility()) == [3.0, 3.0, 3.0]
    assert list(app.mobility(7.0)) == [0.0, 0.0, 0.0]


def test_asap_of_a_join_waits_for_the_slower_branch():
    ts = [Task("a", "cpu0", 1.0), Task("b", "cpu1", 4.0), Task("c", "gpu", 2.0), Task("d", "cpu0", 1.0)]
    app = AppSchedule("J", 20.0, 1, ts, [(0, 1, 0.0), (0, 2, 0.5), (1, 3, 0.0), (2, 3, 0.0)])
    assert list(app.asap) == [0.0, 1.0, 1.5, 5.0]
    assert app.response_isolated == 6.0
    assert list(app.mobility()) == [14.0, 14.0, 15.5, 14.0]  # c: ALAP 20 - 2 - 1


def test_a_cyclic_task_graph_is_refused():
    with pytest.raises(InputError, match="cycle"):
        AppSchedule("C", 1.0, 1, [Task("a", "x", 1.0), Task("b", "x", 1.0)],
                    [(0, 1, 0.0), (1, 0, 0.0)])


def busy_pattern():
    """Firings on 'pe' at [0, 2] and [5, 6] every 10 (a gap on another element between)."""
    return chain("D", 10.0, 1, [("pe", 2.0), ("other", 3.0), ("pe", 1.0)])


@pytest.mark.parametrize("t, want", [(1, 1), (3, 2), (4, 2), (6, 3), (7, 3), (10, 3), (12, 5),
                                     (20, 6)])
def test_dbf_by_hand(t, want):
    # e.g. t=12: the window [0, 12] holds [0,2], [5,6] and the next period's [10,12]
    assert dbf(busy_pattern(), "pe", float(t)) == pytest.approx(want)


def test_dbf_of_an_element_the_app_does_not_use_is_zero():
    assert dbf(busy_pattern(), "gpu", 50.0) == 0.0
    assert dbf(busy_pattern(), "pe", 0.0) == 0.0


def test_dbf_with_jitter_is_the_wider_window_capped_at_the_window():
    app = busy_pattern()
    assert dbf(app, "pe", 3.0, jitter=3.0) == pytest.approx(dbf(app, "pe", 6.0))
    assert dbf(app, "pe", 1.0, jitter=5.0) == pytest.approx(1.0)


@st.composite
def periodic_schedules(draw):
    """Random non-overlapping firings on one element within a period."""
    n = draw(st.integers(1, 5))
    lengths = draw(st.lists(st.floats(0.1, 3.0), min_size=n, max_size=n))
    gaps = draw(st.lists(st.floats(0.0, 3.0), min_size=n, max_size=n))
    tasks, edges, t = [], [], 0.0
    for i, (c, g) in enumerate(zip(lengths, gaps)):
        if g > 0:
            tasks.append(Task(f"gap{i}", "elsewhere", g))
            if len(tasks) > 1:
                edges.append((len(tasks) - 2, len(tasks) - 1, 0.0))
        tasks.append(Task(f"t{i}", "pe", c))
        if len(tasks) > 1:
            edges.append((len(tasks) - 2, len(tasks) - 1, 0.0))
        t += g + c
    period = t + draw(st.floats(0.0, 5.0))
    return AppSchedule("R", period, 1, tasks, edges)


@settings(max_examples=60, deadline=None)
@given(periodic_schedules(), st.floats(0.0, 30.0), st.floats(0.0, 10.0))
def test_dbf_properties(app, t, dt):
    busy = app.busy("pe")
    d = dbf(app, "pe", t)
    assert 0.0 <= d <= t + 1e-9
    assert dbf(app, "pe", t + dt) >= d - 1e-9  # more window, no less demand
    assert dbf(app, "pe", t + app.period) == pytest.approx(d + busy, abs=1e-6)  # periodic
    assert dbf(app, "pe", app.period) == pytest.approx(busy, abs=1e-6)
    assert rbf(app, "pe", t) >= d - 1e-9  # whole firings ready in a window cover its demand


def test_rbf_counts_whole_firings_ready_in_a_closed_window():
    app = busy_pattern()  # ready at 0 (2 long) and 5 (1 long), every 10
    assert rbf(app, "pe", 0.0) == 2.0
    assert rbf(app, "pe", 4.9) == 2.0
    assert rbf(app, "pe", 5.0) == 3.0  # [0, 5] holds both ready times
    assert rbf(app, "pe", 10.0) == 5.0  # [0, 10] also holds the next period's first
    assert rbf(app, "pe", 2.0, jitter=3.0) == 3.0


def test_blocking_is_the_longest_lower_priority_firing_on_the_element():
    a, b = two_on_gpu()
    c = chain("C", 50.0, 3, [("gpu", 7.0), ("cpu", 9.0)])
    apps = [a, b, c]
    assert blocking(a, "gpu", apps) == 7.0
    assert blocking(b, "gpu", apps) == 7.0
    assert blocking(b, "cpu", apps) == 9.0
    assert blocking(c, "gpu", apps) == 0.0


def test_eq10_and_eq11_by_hand():
    a, b = two_on_gpu()
    apps = [a, b]
    # B: ASAP [0, 3], R = 8, MAI = 20 - 8 = 12 for both; A demands dbf(A, gpu, 20) = 8
    assert list(eq10_slack(b, apps)) == pytest.approx([12.0, 4.0])
    assert list(eq11_slack(b, apps)) == pytest.approx([12.0, 4.0])  # nothing below B
    # A: MAI = 10 - 4 = 6, nothing above it; below it B's 5 on the GPU may be running
    assert list(eq10_slack(a, apps)) == pytest.approx([6.0])
    assert list(eq11_slack(a, apps)) == pytest.approx([1.0])


def test_interference_bound_by_hand():
    a, b = two_on_gpu()
    apps = [a, b]
    # A waits at most for B's GPU firing: R_A = 5 + 4
    assert response_bound(a, apps) == pytest.approx(9.0)
    ready_a, finish_a = worst_times(a, apps)
    assert list(ready_a) == [0.0] and list(finish_a) == [9.0]
    # A's one task is ready at each release (no jitter, though it may start 5 late); B's GPU
    # task (ready at 3) waits for one A firing: w = rbf(A, gpu, w) = 4; R_B = 3 + 4 + 5
    assert release_jitter(a, ready_a) == {"gpu": 0.0}
    jit = {"A": release_jitter(a, ready_a)}
    assert task_wait(b, 1, apps, jit, 80.0) == pytest.approx(4.0)
    assert task_wait(b, 0, apps, jit, 80.0) == 0.0
    assert response_bound(b, apps, {"A": ready_a}) == pytest.approx(12.0)


def test_release_jitter_of_a_late_successor_widens_the_window():
    # H: 1 on the CPU then 5 on the GPU, every 10; its GPU task is ready at 1 alone, but as
    # late as 1 + 6 when the CPU task waits for M's 6 long firing there
    h = chain("H", 10.0, 1, [("cpu", 1.0), ("gpu", 5.0)])
    m = chain("M", 40.0, 2, [("cpu", 6.0)])
    l = chain("L", 40.0, 3, [("gpu", 1.0)])
    apps = [h, m, l]
    ready_h, _ = worst_times(h, apps)
    assert list(ready_h) == pytest.approx([0.0, 7.0])
    assert release_jitter(h, ready_h) == pytest.approx({"cpu": 0.0, "gpu": 6.0})
    # L's GPU task: without jitter one H firing (5) delays it; with it, one H firing ready
    # late at 7 and the next on time at 11 bunch up: L, ready at 7, starts at 17
    assert task_wait(l, 0, apps, {}, 160.0) == pytest.approx(5.0)
    jit = {"H": release_jitter(h, ready_h)}
    assert rbf(h, "gpu", 5.0, 6.0) == 10.0
    assert task_wait(l, 0, apps, jit, 160.0) == pytest.approx(10.0)
    assert analyse(apps)["L"].response_worst == pytest.approx(10.0 + 1.0)


def test_a_wait_that_never_ends_stops_at_the_limit():
    hog = chain("H", 10.0, 1, [("gpu", 9.5)])
    late = chain("L", 100.0, 2, [("gpu", 1.0)])
    # every 10 the GPU has 9.5 of higher-priority work: the wait converges (0.5 gaps suffice)
    assert response_bound(late, [hog, late]) == pytest.approx(9.5 + 1.0)
    over = chain("O", 10.0, 1, [("gpu", 10.5)])  # more work than time: no fixed point
    assert response_bound(late, [over, late]) > 4 * 100.0


def test_analyse_and_penalty():
    a, b = two_on_gpu()
    res = analyse([a, b])
    assert res["A"].schedulable and res["B"].schedulable
    assert res["A"].response_worst == pytest.approx(9.0)
    assert res["B"].response_worst == pytest.approx(12.0)
    assert res["B"].eq11_min_slack == pytest.approx(4.0)
    assert penalty(res["A"]) == 0.0
    # B's GPU firing grows to 22: A (every 10, 4 long) can now wait 22 > its slack of 6
    big = chain("B", 50.0, 2, [("cpu", 3.0), ("gpu", 22.0)])
    res = analyse([a, big])
    assert not res["A"].schedulable
    assert res["A"].eq11_min_slack == pytest.approx(6.0 - 22.0)
    assert res["A"].response_worst == pytest.approx(26.0)
    assert res["A"].bottleneck == "gpu"
    assert penalty(res["A"]) == PENALTY
    assert res["A"].missed_by == pytest.approx(16.0)


def test_analyse_refuses_a_priority_clash():
    a, b = two_on_gpu()
    with pytest.raises(InputError, match="priority clash"):
        analyse([a, chain("C", 10.0, 1, [("cpu", 1.0)])])


def test_utilisation_and_energy():
    a, b = two_on_gpu()
    assert utilisation([a, b]) == pytest.approx({"gpu": 0.4 + 0.25, "cpu": 0.15})
    assert energy_rate([a, b], {"gpu": 10.0, "cpu": 2.0}) == pytest.approx(
        4 * 10 / 10 + (3 * 2 + 5 * 10) / 20)
    assert energy_rate([a, b], {"gpu": 10.0, "cpu": None}) is None


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["cpu", "gpu"]), st.floats(0.1, 5.0)),
                min_size=1, max_size=6),
       st.floats(0.1, 5.0), st.floats(5.0, 30.0))
def test_response_bound_is_at_least_alone_and_grows_with_a_higher_priority_app(tasks, hp_c, hp_p):
    low = chain("L", 1000.0, 2, tasks)
    alone = response_bound(low, [low])
    assert alone == pytest.approx(low.response_isolated)
    hp = chain("H", hp_p, 1, [("gpu", hp_c)])
    with_hp = response_bound(low, [hp, low], {"H": worst_times(hp, [hp, low])[0]})
    assert with_hp >= alone - 1e-9
    if any(e == "gpu" for e, _ in tasks):
        assert with_hp >= alone + hp_c - 1e-9  # a GPU task can always meet one H firing


# ---------------------------------------------------------------- the bound against a simulation


@st.composite
def app_sets(draw):
    """2-3 apps, each a random DAG of 1-5 tasks on three elements, whose tasks on one element
    are in sequence (as the phases of one actor are), with distinct priorities."""
    n_apps = draw(st.integers(2, 3))
    apps = []
    for k in range(n_apps):
        n = draw(st.integers(1, 5))
        tasks = [Task(f"t{k}{i}", draw(st.sampled_from(["e0", "e1", "e2"])),
                      draw(st.floats(0.2, 3.0))) for i in range(n)]
        edges = set()
        for i in range(1, n):
            for p in draw(st.sets(st.integers(0, i - 1), min_size=1, max_size=2)):
                edges.add((p, i, draw(st.sampled_from([0.0, 0.3]))))
        for i in range(n):  # one actor per element: its tasks in sequence
            later = [j for j in range(i + 1, n) if tasks[j].element == tasks[i].element]
            if later and not any(a == i and b == later[0] for a, b, _ in edges):
                edges.add((i, later[0], 0.0))
        probe = AppSchedule(f"A{k}", 1.0, k + 1, tasks, sorted(edges))
        period = probe.response_isolated * draw(st.floats(1.5, 6.0))
        apps.append(AppSchedule(f"A{k}", period, k + 1, tasks, sorted(edges)))
    return apps


@settings(max_examples=60, deadline=None)
@given(app_sets(), st.lists(st.floats(0.0, 20.0), min_size=3, max_size=3))
def test_simulated_responses_never_exceed_the_bound(apps, offsets):
    from simulate import simulate

    res = analyse(apps)
    if not all(r.response_worst <= r.period for r in res.values()):
        return  # the bound assumes every app meets its deadline (one frame in flight)
    horizon = 40 * max(a.period for a in apps)
    seen = simulate(apps, {a.name: o for a, o in zip(apps, offsets)}, horizon)
    for a in apps:
        assert seen[a.name] <= res[a.name].response_worst + 1e-9, (a.name, seen, res)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 500), n_layers=st.integers(3, 8), b=st.sampled_from([2, 4]),
       data=st.data())
def test_a_schedule_s_batches_deadlock_where_the_csdf_application_s_do(
        seed, n_layers, b, data):
    """A schedule's `deadlock` (its batches cannot fill) exactly where the throughput
    analysis of the same mapping's CSDF application (`mapping.problem.evaluate`) finds one,
    on random CNNs and random assignments of their layers to two cores and a batched GPU:
    the multi-CNN search marks such an application as missing its deadline."""
    from hetflow.errors import DeadlockError
    from hetflow.mapping.problem import evaluate
    from hetflow.multi.problem import schedule_of
    from hetflow.plan.mapping import Mapping

    from multi_helpers import app_problem, with_batches

    app = with_batches(app_problem(n_layers, seed, 0.1, 1))
    layers = [layer.name for layer in app.graph.layers]
    where = data.draw(st.lists(st.sampled_from(["cpu0", "cpu1", "gpu0"]), min_size=len(layers),
                               max_size=len(layers)))
    assume("gpu0" in where)
    mapping = Mapping(dict(zip(layers, where)), batch={"gpu0": b})
    try:
        evaluate(app.problem, mapping, with_latency=False)
        deadlocks = False
    except DeadlockError:
        deadlocks = True
    why = schedule_of(app, mapping).deadlock
    event("deadlocks" if deadlocks else "runs")
    assert (why is not None) == deadlocks
