import os

import pytest

from hetflow.errors import RuntimeFault
from hetflow.model.subnet import subnet_key
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform import CpuCluster, Platform
from hetflow.profile.under_load import time_stages_together

CORES = tuple(sorted(os.sched_getaffinity(0)))


@pytest.fixture(scope="module")
def graph():
    return random_cnn_graph(10, seed=4, channels=8, size=16)


@pytest.fixture(scope="module")
def cpus():
    return Platform("p", (CpuCluster("cpu", CORES[:2]),)).all_elements()


def test_every_stage_of_every_element_is_timed(graph, cpus):
    one, two = [e for e in cpus if len(e.cores) == 1][:2] if len(CORES) > 1 else (cpus[0], None)
    layers = [l.name for l in graph.layers]
    work = [(one, [layers[:4], layers[4:]])]
    if two is not None:
        work.append((two, [layers]))
    got = time_stages_together(graph, work, seconds=0.2, min_samples=3)
    want = {(one.name, subnet_key(layers[:4])), (one.name, subnet_key(layers[4:]))}
    if two is not None:
        want.add((two.name, subnet_key(layers)))
    assert set(got) == want
    for st in got.values():
        assert st["n"] >= 3 and 0 < st["p10"] <= st["median"] <= st["max"]


def test_a_failing_stage_names_its_element(graph, cpus, monkeypatch):
    from hetflow.backends.ort_cpu import OrtCpuBackend

    real = OrtCpuBackend.prepare

    def prepare(self, subnet, element, **kw):
        runner = real(self, subnet, element, **kw)
        if element is cpus[0]:
            def boom(feeds):
                raise ValueError("injected")
            runner.run = boom
        return runner

    monkeypatch.setattr(OrtCpuBackend, "prepare", prepare)
    with pytest.raises(RuntimeFault, match=rf"element {cpus[0].name}: ValueError: injected"):
        time_stages_together(graph, [(cpus[0], [[l.name for l in graph.layers]])], seconds=0.1)
