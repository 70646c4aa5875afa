"""An element in a process of its own: its proxies return what the runners return in this
process; a failing runner, a failed build and a dead process each raise BackendError naming the
element instead of hanging; closing ends the process."""
import os

import numpy as np
import pytest

from hetflow.backends import backend_for
from hetflow.backends.isolated import IsolatedElement
from hetflow.errors import BackendError
from hetflow.model.subnet import extract_subnet
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform.spec import ProcessingElement
from hetflow.profile.measure import random_feeds

CORE = sorted(os.sched_getaffinity(0))[0]
CPU = ProcessingElement("cpu7", "cpu", (CORE,))
GRAPH = random_cnn_graph(8, 3)


def halves():
    names = [l.name for l in GRAPH.layers]
    return [extract_subnet(GRAPH, names[:4], name="a"), extract_subnet(GRAPH, names[4:], name="b")]


def test_proxies_return_what_the_runners_return_here():
    subs = halves()
    host = IsolatedElement(CPU, subs, lanes=2)
    try:
        assert [len(rs) for rs in host.runners] == [2, 2]
        for sub, lanes in zip(subs, host.runners):
            local = backend_for(CPU).prepare(sub, CPU)
            try:
                for seed in range(3):
                    feeds = random_feeds(GRAPH, sub.inputs, seed=seed)
                    want = local.run(feeds)
                    for proxy in lanes:
                        got = proxy.run(feeds)
                        assert set(got) == set(want)
                        for t in want:
                            np.testing.assert_array_equal(got[t], want[t])
            finally:
                local.close()
    finally:
        host.close()
    assert not host.process.is_alive()


def test_a_failing_run_raises_here_and_the_element_keeps_serving():
    sub = halves()[0]
    host = IsolatedElement(CPU, [sub])
    proxy = host.runners[0][0]
    try:
        with pytest.raises(BackendError, match="was not given"):
            proxy.run({})
        wrong = {t: np.zeros((1, 1), np.float32) for t in sub.inputs}
        with pytest.raises(BackendError):
            proxy.run(wrong)  # the child's runner raises; its message comes back
        assert proxy.run(random_feeds(GRAPH, sub.inputs))  # and the next firing works
    finally:
        proxy.close()


def test_a_build_that_fails_in_the_child_names_the_element():
    gpu = ProcessingElement("gpu9", "gpu", (CORE,), backend="no_such_backend")
    with pytest.raises(BackendError, match="gpu9"):
        IsolatedElement(gpu, [halves()[0]], ready_timeout=120)


def test_a_dead_process_raises_instead_of_hanging():
    sub = halves()[0]
    host = IsolatedElement(CPU, [sub])
    try:
        host.process.kill()
        host.process.join(5)
        with pytest.raises(BackendError, match="cpu7: its process ended"):
            host.runners[0][0].run(random_feeds(GRAPH, sub.inputs))
    finally:
        host.close()
