"""The process-per-element engine (`run-multi --engine processes`) on tiny models and cores."""
import os
import signal
import time

import onnx
import pytest

from hetflow.errors import InputError, RuntimeFault
from hetflow.plan.mapping import Mapping
from hetflow.model.synthetic import random_cnn_model
from hetflow.multi.procs import hosts, run_processes
from hetflow.multi.run import run_multiplan

from test_runtime import (check_free_running, check_streams, cpu_elements, graphs, plan_of, split,
                          streams_plan, tiny_problem)


def on_files(plan, tmp_path):
    """Point each application at its model saved as a file (the processes load it there)."""
    seeds = {"a": (6, 11), "b": (9, 12)}
    for entry in plan.apps:
        n, seed = seeds[entry.name]
        path = tmp_path / f"{entry.name}.onnx"
        onnx.save(random_cnn_model(n, seed=seed), path)
        entry.plan.model_source = str(path)
        entry.plan.model_hash = ""  # the synthetic graph's tag, not a file hash: not checked
    return plan


def one_element_each(mp):
    e0, e1 = (e.name for e in cpu_elements())
    return plan_of(mp, [Mapping({l.name: e for l in a.graph.layers})
                        for a, e in zip(mp.apps, (e0, e1))])


def test_each_app_on_its_own_process_meets_generous_periods_and_outputs_match(tmp_path):
    mp = tiny_problem(0.05, 0.06)
    plan = on_files(one_element_each(mp), tmp_path)
    report = run_multiplan(plan, graphs(mp), frames=20, warmup=2, engine="processes",
                           trace_path=tmp_path / "t.json")
    assert report.complete and report.wall_s > 0
    for r in report.apps:
        assert r.frames >= 20 and r.notes["missed"] == 0
        assert r.checked_frames == 4 and r.max_abs_error < 1e-3
        assert 0 < r.latency["p50"] <= r.latency["max"] <= r.notes["period_s"]
    assert set(report.utilisation) == {e.name for e in cpu_elements()}
    assert (tmp_path / "t.json").exists()
    for r in report.apps:  # each response = its firings running + waiting, neither negative
        ex, wa = r.notes["exec_s"], r.notes["wait_s"]
        assert 0 < ex["p50"] <= ex["max"] <= r.latency["max"] + 1e-9
        assert 0 <= wa["p50"] <= wa["max"]
        assert ex["mean"] + wa["mean"] == pytest.approx(r.latency["mean"], rel=1e-6)
        assert r.latency["max"] <= ex["max"] + wa["max"] + 1e-9
    assert report.realtime is None  # not asked for


def test_realtime_reports_whether_the_os_allowed_it(tmp_path):
    mp = tiny_problem(0.05, 0.06)
    plan = on_files(one_element_each(mp), tmp_path)
    report = run_multiplan(plan, graphs(mp), frames=10, warmup=1, engine="processes",
                           realtime=True)
    allowed = True
    try:  # what this process may do, the spawned ones may too
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except PermissionError:
        allowed = False
    assert report.realtime is allowed
    assert all(r.frames >= 10 and r.checked_frames == 4 for r in report.apps)
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the parent never changed


def test_realtime_needs_the_process_engine():
    mp = tiny_problem()
    with pytest.raises(InputError, match="--realtime needs the process engine"):
        run_multiplan(one_element_each(mp), graphs(mp), engine="threads", realtime=True)


def test_two_apps_sharing_one_element_are_served_by_priority(tmp_path):
    mp = tiny_problem(0.02, 0.03)
    e0, _ = (e.name for e in cpu_elements())
    plan = on_files(plan_of(mp, [Mapping({l.name: e0 for l in a.graph.layers})
                                 for a in mp.apps]), tmp_path)
    assert hosts(plan) == {e0: ["a", "b"]}
    report = run_multiplan(plan, graphs(mp), frames=10, warmup=1, engine="processes")
    assert all(r.checked_frames == 4 and r.frames >= 10 for r in report.apps)


def test_apps_split_over_elements_in_opposite_orders_pass_tensors_between_processes(tmp_path):
    mp = tiny_problem(0.05, 0.06)
    e0, e1 = (e.name for e in cpu_elements())
    plan = on_files(plan_of(mp, [split(mp.apps[0], e0, e1), split(mp.apps[1], e1, e0)]),
                    tmp_path)
    assert hosts(plan) == {e0: ["a", "b"], e1: ["a", "b"]}
    report = run_multiplan(plan, graphs(mp), frames=15, warmup=1, engine="processes")
    for r in report.apps:
        assert r.frames >= 15 and r.notes["missed"] == 0
        assert r.checked_frames == 4 and r.max_abs_error < 1e-3  # outputs from both processes
        assert 0 < r.latency["max"] <= r.notes["period_s"]


def test_period_zero_runs_free_across_processes(tmp_path):
    """As on the thread engine: the collector's "done" messages pace the other process."""
    mp = tiny_problem()
    e0, e1 = (e.name for e in cpu_elements())
    plan = on_files(plan_of(mp, [split(a, e0, e1) for a in mp.apps]), tmp_path)
    for a in plan.apps:
        a.period = 0.0
    report = run_multiplan(plan, graphs(mp), frames=200, warmup=5, check="first",
                           max_in_flight=2, engine="processes")
    check_free_running(report, 200)


def test_bad_engine_is_refused():
    mp = tiny_problem()
    plan = one_element_each(mp)
    with pytest.raises(InputError, match="--engine 'fibers'"):
        run_multiplan(plan, graphs(mp), engine="fibers")


def test_auto_picks_processes_only_where_every_app_is_on_one_element(tmp_path):
    mp = tiny_problem(0.05, 0.06)
    e0, e1 = (e.name for e in cpu_elements())
    split_plan = plan_of(mp, [split(mp.apps[0], e0, e1), Mapping({l.name: e0 for l in
                                                                   mp.apps[1].graph.layers})])
    r = run_multiplan(split_plan, graphs(mp), frames=3, warmup=0, check="none")
    assert r.engine == "threads"
    r = run_multiplan(on_files(one_element_each(mp), tmp_path), graphs(mp), frames=3, warmup=0,
                      check="none")
    assert r.engine == "processes" and r.to_dict()["engine"] == "processes"


def test_a_process_that_fails_to_load_names_its_element(tmp_path):
    mp = tiny_problem()
    plan = on_files(one_element_each(mp), tmp_path)
    (tmp_path / "b.onnx").write_bytes(b"not onnx")  # b's process cannot load its model
    t0 = time.perf_counter()
    with pytest.raises(RuntimeFault, match=r"element cpu\S*, setup: .*b\.onnx"):
        run_multiplan(plan, graphs(mp), frames=5, warmup=0, engine="processes")
    assert time.perf_counter() - t0 < 60


def endless_run(tmp_path, on_started):
    """Two applications, each on its own process, asked for far more frames than a test waits
    for: the run ends by what `on_started` (given the processes once all of them run)
    arranges."""
    mp = tiny_problem(0.01, 0.012)
    plan = on_files(one_element_each(mp), tmp_path)
    return run_processes(plan, graphs(mp), frames=100000, warmup=0, check_frames=0,
                         max_in_flight=2, stall_timeout=30, trace_path=None, progress=None,
                         seed=0, on_started=on_started)


def test_a_killed_process_stops_the_run_naming_its_element(tmp_path):
    import threading

    procs, killed_at = [], []

    def killer():
        while not procs:
            time.sleep(0.05)
        time.sleep(1.0)  # on_started: every process loaded and running
        killed_at.append(time.perf_counter())
        os.kill(procs[1].pid, signal.SIGKILL)

    threading.Thread(target=killer, daemon=True).start()
    with pytest.raises(RuntimeFault, match=r"element cpu\S+: its process died \(exit code -9\)"):
        endless_run(tmp_path, procs.extend)
    assert time.perf_counter() - killed_at[0] < 2.0  # the whole run stopped, no orphans
    for p in procs:
        assert not p.is_alive()


def test_ctrl_c_stops_every_process_and_reports_what_was_measured(tmp_path):
    import _thread
    import threading

    procs = []

    def interrupt_later(ps):
        procs.extend(ps)
        # as Ctrl-C does, a second into the run (on_started: every process running)
        threading.Timer(1.0, _thread.interrupt_main).start()

    report = endless_run(tmp_path, interrupt_later)
    assert not report.complete
    assert all(0 < r.frames < 100000 for r in report.apps)
    assert not any(p.is_alive() for p in procs)


def test_an_actor_with_several_phases_keeps_their_order_across_frames(tmp_path):
    """a: e0 -> e1 -> e0 (actor e0 has two phases per frame, with e1's firing between them);
    frames overlap (the period is shorter than a frame), and every output still matches."""
    mp = tiny_problem(0.0003, 0.05)
    e0, e1 = (e.name for e in cpu_elements())
    layers = [l.name for l in mp.apps[0].graph.layers]
    third = max(1, len(layers) // 3)
    back_and_forth = Mapping({l: e1 if third <= i < 2 * third else e0
                              for i, l in enumerate(layers)})
    plan = on_files(plan_of(mp, [back_and_forth, Mapping({l.name: e1 for l in
                                                          mp.apps[1].graph.layers})]), tmp_path)
    assert len(plan.apps[0].plan.app.phases[e0]) == 2
    report = run_multiplan(plan, graphs(mp), frames=40, warmup=0, check_frames=4,
                           engine="processes", max_in_flight=3, trace_path=tmp_path / "t.json")
    a = next(r for r in report.apps if r.name == "a")
    assert a.frames >= 40 and a.checked_frames == 4 and a.max_abs_error < 1e-3
    import json

    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    firings = sorted((e["ts"], e["args"]["frame"], int(e["name"].rsplit("#", 1)[1]))
                     for e in events if e.get("ph") == "X" and e["name"].startswith(f"a:{e0}#"))
    assert len(firings) >= 2 * 40
    order = [(f, ph) for _, f, ph in firings]
    assert order == sorted(order)  # e0 fires (frame, phase) in CSDF order, frames in turn


def test_no_frame_for_the_stall_timeout_is_a_stall_naming_the_applications(tmp_path):
    mp = tiny_problem(0.05, 0.06)
    plan = on_files(one_element_each(mp), tmp_path)
    for entry in plan.apps:
        entry.period = 30.0  # frame 0 now, frame 1 in 30 s: nothing completes in between
    t0 = time.perf_counter()
    with pytest.raises(RuntimeFault, match=r"stall: no frame completed for 2 s by a, b \(a 1/3, b 1/3; "
                                           r"cpu\S+: waiting for the next release; cpu\S+: "
                                           r"waiting for the next release\)"):
        run_processes(plan, graphs(mp), frames=3, warmup=0, check_frames=0, max_in_flight=2,
                      stall_timeout=2.0, trace_path=None, progress=None, seed=0)
    assert time.perf_counter() - t0 < 30


def test_streams_run_in_processes_as_in_threads(tmp_path):
    mp = tiny_problem(0.15, 0.2)
    plan = on_files(streams_plan(mp, 3), tmp_path)
    check_streams(run_multiplan(plan, graphs(mp), frames=9, warmup=1, check="first",
                                engine="processes"))
