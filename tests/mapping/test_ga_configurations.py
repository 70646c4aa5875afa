"""The GA compares configurations by analysed throughput, not by fitness values that do not
compare across configurations (Eq. 3.1 is 0 on any one-element configuration); the max-load
fitness minimises the bottleneck element's time."""
from dataclasses import replace
import numpy as np
import pytest

from hetflow.plan.mapping import Mapping
from hetflow.mapping.problem import evaluate
from hetflow.mapping.strategies.ga import Encoding, LoadBalanceModel, search

pytest.importorskip("pymoo")


def test_a_one_element_configuration_does_not_win_by_its_zero_fitness(factory):
    p = factory.problem(8, factory.elements(4), seed=2)
    p = replace(p, configurations=[["cpu0"], ["cpu0", "cpu1", "cpu2", "cpu3"]])
    r = search(p, seed=1, final="fitness", pop_size=24, epochs=15, stall=5)
    alone = evaluate(p, Mapping({l.name: "cpu0" for l in p.graph.layers})).throughput
    assert r.notes["runs"][0]["best_fitness"] == 0.0  # the one-element configuration's
    assert r.metrics.throughput > alone
    assert len(set(r.best.elements)) > 1


def test_max_load_fitness_is_never_worse_than_its_seeds(factory):
    from hetflow.mapping.strategies.ga import baseline_seeds

    p = factory.problem(10, factory.elements(3), seed=4)
    names = [e.name for e in p.elements]
    p = replace(p, configurations=[names])
    r = search(p, seed=0, fitness="max_load", final="fitness", pop_size=40, epochs=30, stall=10)
    enc = Encoding(p, names, True)
    model = LoadBalanceModel.build(enc)
    best = r.notes["runs"][0]["best_fitness"]
    x = enc.encode(r.best)
    assert x is not None and float(model.max_load(enc, np.array([x]))[0]) == pytest.approx(best)
    for m in baseline_seeds(p, names).values():
        xs = enc.encode(m)
        if xs is not None:  # elitist and seeded: the GA keeps the best of its seeds at least
            assert float(model.max_load(enc, np.array([xs]))[0]) >= best - 1e-12
