import os

import pytest

from hetflow.errors import RuntimeFault
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform import CpuCluster, Platform
from hetflow.runtime.baselines import measure_parallel, measure_single
from hetflow.runtime.inputs import random_source
from patching import patch_everywhere

CORES = tuple(sorted(os.sched_getaffinity(0)))


@pytest.fixture(scope="module")
def graph():
    return random_cnn_graph(8, seed=2, channels=8, size=16)


def singles():
    return [e for e in Platform("p", (CpuCluster("cpu", CORES[:2]),)).all_elements()
            if len(e.cores) == 1]


def test_parallel_copies_share_the_frames(graph):
    els = singles()
    r = measure_parallel(graph, els, random_source(graph), frames=60, warmup=2)
    assert r.frames == 60 and r.throughput > 0
    fps = r.notes["per_element_fps"]
    assert set(fps) == {e.name for e in els} and sum(fps.values()) == pytest.approx(r.throughput)
    assert 0 < r.latency["p50"] <= r.latency["p99"]


def test_copies_run_with_the_callers_heap_out_of_the_collectors_scans(graph):
    """As the engine runs its workers: objects that exist before the copies start are frozen
    while they run (a full collection over a big heap stalls every copy), and thawed after."""
    import gc

    seen = []

    def source(f, inner=random_source(graph)):
        seen.append(gc.get_freeze_count())
        return inner(f)

    assert gc.get_freeze_count() == 0
    measure_parallel(graph, singles(), source, frames=10, warmup=1)
    assert seen and min(seen[2:]) > 0  # the warm-up frames may come before the freeze
    assert gc.get_freeze_count() == 0


def test_single_runs_for_the_seconds_asked(graph):
    r = measure_single(graph, singles()[0], random_source(graph), warmup=2, seconds=0.2)
    assert r.name == f"single:{singles()[0].name}" and r.frames > 0


def test_a_failing_copy_names_its_element(graph, monkeypatch):
    from hetflow.runtime import baselines

    real = baselines.runners_for_many

    def many(g, wanted, threads=8):
        built = real(g, wanted, threads)
        for (_, element, _, _), rs in zip(wanted, built):
            if element.name == singles()[-1].name:
                def boom(feeds):
                    raise ValueError("injected")
                rs[0].run = boom
        return built

    patch_everywhere(monkeypatch, baselines, "runners_for_many", many)
    with pytest.raises(RuntimeFault, match=rf"parallel baseline: element {singles()[-1].name}: "
                                           "ValueError: injected"):
        measure_parallel(graph, singles(), random_source(graph), frames=20, warmup=1)


def test_a_slow_copy_still_under_way_when_the_window_ends_costs_the_others_nothing(graph,
                                                                                monkeypatch):
    """One copy takes 0.2 s a frame, the other 4 ms, in a 0.3 s window: each copy's rate is
    what its own frames say (1 / its mean frame time), the slow one's last frame counted by its
    share inside the window; summed, not frames over the time the slow frame ended."""
    import time

    from hetflow.runtime import baselines

    real = baselines.runners_for_many
    own: dict[str, list[float]] = {}

    def many(g, wanted, threads=8):
        built = real(g, wanted, threads)
        for (_, element, _, _), rs in zip(wanted, built):
            pause = 0.2 if element.name == singles()[0].name else 0.004
            took = own.setdefault(element.name, [])

            def run(feeds, pause=pause, took=took):
                t0 = time.perf_counter()
                time.sleep(pause)
                took.append(time.perf_counter() - t0)
                return {}
            rs[0].run = run
        return built

    patch_everywhere(monkeypatch, baselines, "runners_for_many", many)
    r = measure_parallel(graph, singles(), random_source(graph), warmup=1, seconds=0.3)
    fps = r.notes["per_element_fps"]
    for name, took in own.items():
        want = 1 / (sum(took) / len(took))
        assert fps[name] == pytest.approx(want, rel=0.25), name
    assert r.throughput == pytest.approx(sum(fps.values()))
