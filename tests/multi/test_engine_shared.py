"""The shared element driver (`runtime.loop.drive_shared`) on runners of known duration: fixed
priority, non-preemptive at the granularity of one firing; and the admission of frames."""
import os
import threading
import time

import numpy as np
import pytest

from hetflow.plan.mapping import Mapping
from hetflow.runtime.engine import PreparedPlan
from hetflow.runtime.harness import Control
from hetflow.runtime.loop import Dispatched, drive_shared
from hetflow.multi.apps import Admission, app_results, app_run, frames_per_app, peak_in_flight

from test_runtime import cpu_elements, plan_of, tiny_problem

FIRING = 0.003  # s: every fake firing


class Sleeper:
    """A runner that takes FIRING seconds (the GIL released, as a backend's run) and returns
    zeros for every tensor its layers produce."""

    def __init__(self, graph, layers):
        self.outs = {t: np.zeros(1, np.float32) for l in layers for t in graph.layer(l).outputs}

    def run(self, feeds):
        time.sleep(FIRING)
        return dict(self.outs)


def sleepers(plan, graph) -> PreparedPlan:
    runners = {(actor, ph.index): Sleeper(graph, ph.layers)
               for actor, phases in plan.app.phases.items() for ph in phases}
    return PreparedPlan(plan, graph, runners)


def drive_one_element(plan, graphs, el: str, until: int, limit: int, prepared=sleepers):
    """Both applications of `plan` on element `el` under one `drive_shared` thread, their
    runners from `prepared(plan, graph)`, until the first has completed `until` frames; the
    runs (with their stream's trace events)."""
    control = Control()
    wakes = {el: threading.Event()}
    runs = [app_run(i, a, prepared(a.plan, graphs[a.name]), n, control, limit,
                    lambda k: False, 0, wakes, trace=True)
            for i, (a, n) in enumerate(zip(plan.apps, frames_per_app(plan, until)))]
    tenants = [t for r in runs for t in r.tenants()]
    driver = threading.Thread(target=drive_shared, daemon=True,
                              args=(el, tenants, control, wakes[el],
                                    sorted(os.sched_getaffinity(0))[:1], Dispatched()))
    t0 = time.perf_counter() + 0.005
    for r in runs:
        r.start(t0)
    driver.start()
    deadline = time.perf_counter() + 30
    while runs[0].done() < until and time.perf_counter() < deadline:
        time.sleep(0.01)
    control.stop.set()
    driver.join(5)
    control.raise_fault()
    assert not driver.is_alive()
    return runs


def on_one_element(periods):
    mp = tiny_problem()
    e0, _ = (e.name for e in cpu_elements())
    plan = plan_of(mp, [Mapping({l.name: e0 for l in a.graph.layers}) for a in mp.apps])
    for a, p in zip(plan.apps, periods):
        a.period = p
    return plan, {a.name: a.graph for a in mp.apps}, e0


def test_a_higher_priority_frame_waits_for_at_most_the_one_firing_under_way():
    """b (low priority) runs free and always has a firing ready; a (high) is released every
    20 ms. No firing of b starts between a frame of a's release and a's firing of it, and a's
    firing starts as soon as the firing of b under way at its release (if any) has ended: each
    response is a's own firing plus at most one of b's (and the driver's wake-up)."""
    plan, graphs, el = on_one_element([0.02, 0.0])
    assert [a.priority for a in plan.apps] == [1, 2]
    a, b = drive_one_element(plan, graphs, el, until=25, limit=2)
    starts_a = {f: t0 for _, _, _, f, t0, _ in a.stream.events.events}
    firings_b = sorted((t0, t1) for *_, t0, t1 in b.stream.events.events)
    assert len(firings_b) >= 10  # b ran beside a
    slack = 0.005  # s: a thread woken on this loaded 2-core machine
    for f in range(25):
        released = a.admission.release[f]
        between = [s for s, _ in firings_b if released + slack < s < starts_a[f]]
        assert not between, f"frame {f} of a waited for b's firings at {between}"
        under_way = [e for s, e in firings_b if s <= released < e]
        assert starts_a[f] <= max([released, *under_way]) + slack


def test_free_running_frames_enter_as_earlier_ones_complete():
    plan, graphs, el = on_one_element([0.0, 0.0])
    a, _ = drive_one_element(plan, graphs, el, until=20, limit=3)
    res = app_results([a.measured(0, 0)])
    assert res["peak_in_flight"] == 3 and res["late_releases"] == 0
    entered = a.admission.arrive_at
    done = a.order.finished
    for f in range(3, 20):  # frame f entered as frame f - 3 completed, not before
        assert done[f - 3] <= entered[f] < done[f - 3] + 0.005


def test_admission_holds_a_frame_back_until_there_is_room_and_counts_it_late():
    wake = threading.Event()
    adm = Admission(0.01, 6, 2, [wake])
    adm.start(100.0)
    assert adm.arrive_at[:2].tolist() == [100.0, 100.01]
    assert np.isinf(adm.arrive_at[2:]).all()
    adm.completed(100.005)  # frame 0 done before frame 2's release: frame 2 enters on time
    assert adm.arrive_at[2] == pytest.approx(100.02) and wake.is_set()
    adm.completed(100.05)  # frame 1 done after frame 3's release: frame 3 enters late
    assert adm.arrive_at[3] == 100.05 > adm.release[3]  # a late release
    free = Admission(0.0, 4, 1, [])
    free.start(5.0)
    free.completed(5.2)
    assert free.release[1] == free.arrive_at[1] == 5.2  # released as it enters


def test_peak_in_flight_counts_frames_entered_and_not_yet_done():
    entered = np.array([0.0, 0.0, 1.0, 2.0, np.inf])
    done = np.array([1.0, 2.0, 3.0, np.nan, np.nan])
    assert peak_in_flight(entered, done) == 2


def test_a_frame_a_lane_finished_early_has_left_the_run_before_its_release_in_order():
    """Limit 3, two lanes: frame 1 completes at 1.0 ahead of frame 0 (2.0) and admits frame 3
    at 1.0. The admission's completions hold three in the run; the in-order releases (frame 1
    released at 2.0, after frame 0) would read four. Entries come from several threads a hair
    out of order."""
    admission = Admission(0.0, 5, 3, [])
    admission.start(0.0)
    admission.completed(1.0)  # frame 1, by the second lane
    admission.completed(2.0)  # frame 0
    admission.completed(2.0)  # frame 2
    entered = admission.arrive_at
    assert list(entered[:4]) == [0.0, 0.0, 0.0, 1.0]
    assert peak_in_flight(entered, np.array(admission.completed_at)) == 3
    in_order = np.array([2.0, 2.0, 2.0, np.nan, np.nan])
    assert peak_in_flight(entered, in_order) == 4  # what the in-order releases would say
    assert peak_in_flight(np.array([0.0, 1.0, 0.999, 2.0]), np.array([1.5, 2.5, 3.0, 4.0])) == 3


def test_frames_per_app_keeps_the_faster_application_running_until_the_slower_is_done():
    plan, _, _ = on_one_element([0.01, 0.04])
    assert frames_per_app(plan, 100) == [100 + 400, 100 + 100]
    plan.apps[1].period = 0.0
    assert frames_per_app(plan, 100) == [100 + 100, 800]


class Launcher:
    """A runner that launches: a run takes FIRING seconds off the calling thread (a device's),
    and the most runs in flight at once, over every Launcher of `count`, is recorded."""

    def __init__(self, graph, layers, count: dict):
        self.outs = {t: np.zeros(1, np.float32) for l in layers for t in graph.layer(l).outputs}
        self.count, self.done_at = count, None

    def submit(self, feeds):
        with self.count["lock"]:
            self.count["now"] += 1
            self.count["most"] = max(self.count["most"], self.count["now"])
        self.done_at = time.perf_counter() + FIRING

    def finished(self):
        return time.perf_counter() >= self.done_at

    def wait(self):
        while not self.finished():
            time.sleep(FIRING / 10)

    def collect(self):
        self.wait()
        with self.count["lock"]:
            self.count["now"] -= 1
        return dict(self.outs)

    def close(self):
        pass


def test_a_device_elements_lanes_are_shared_by_every_application_on_it():
    """Two applications, each with 2 lanes on one launching element: at most 2 runs are in
    flight at once among both (the element's k lanes of the analysis), not 2 each: b runs free
    on both lanes, and a frame of a released meanwhile waits for one of them."""
    plan, graphs, el = on_one_element([0.01, 0.0])
    count = {"lock": threading.Lock(), "now": 0, "most": 0}
    for a in plan.apps:
        a.plan.mapping.lanes[el] = 2

    def launchers(plan_, graph):
        runners, more = {}, {}
        for actor, phases in plan_.app.phases.items():
            for ph in phases:
                runners[(actor, ph.index)] = Launcher(graph, ph.layers, count)
                more[(actor, ph.index)] = [Launcher(graph, ph.layers, count)]
        return PreparedPlan(plan_, graph, runners, more_lanes=more)

    runs = drive_one_element(plan, graphs, el, until=20, limit=4, prepared=launchers)
    assert all(w.on_device and w.program.lanes == 2 for r in runs for w in r.workers)
    assert runs[0].done() >= 20 and runs[1].done() >= 20
    assert count["most"] == 2
