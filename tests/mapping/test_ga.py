"""Minakova's GA: encoding, Eq. 3.1-3.4 fitness, seeding, determinism, configurations."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetflow.errors import InputError
from hetflow.plan.mapping import Mapping, group_members
from hetflow.mapping.problem import evaluate
from hetflow.mapping.strategies import ga
from hetflow.mapping.strategies.base import configurations, get_strategy
from hetflow.platform.spec import ProcessingElement


@pytest.fixture(scope="module")
def problem(factory):
    return factory.problem(9, factory.elements(3, 1, 1), seed=11)


@pytest.fixture(scope="module")
def enc(problem):
    return ga.Encoding(problem, configurations(problem)[0])


def chromosomes(enc_upper):
    return st.tuples(*[st.integers(0, int(u)) for u in enc_upper]).map(np.array)


def eq_3_1_to_3_4(problem, config, mapping: Mapping) -> float:
    """The paper's fitness written out plainly, for one mapping."""
    g = problem.graph
    tau = {e: 0.0 for e in config}
    for actor in mapping.actors:
        members = group_members(actor)
        layers = [l for l, a in mapping.assignment.items() if a == actor]
        t = sum(problem.layer_times[g.layer_index[l], problem.element_index[members[0]]]
                for l in layers)  # Eq. 3.3
        for e in g.edges:  # Eq. 3.4: writes of its producers, reads of its consumers
            src, dst = mapping.assignment[e.src], mapping.assignment[e.dst]
            if src != dst and actor in (src, dst):
                # the chromosome's own elements; identical members move data alike
                t += problem.transfer(g.tensors[e.tensor].nbytes, group_members(src)[0],
                                      group_members(dst)[0])
        for m in members:
            tau[m] = t / len(members)  # Eq. 3.2, shared by a replica group
    return sum(abs(tau[a] - tau[b]) for a, b in itertools.combinations(config, 2))  # Eq. 3.1


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_decode_encode_canonical_agree(enc, data):
    x = data.draw(chromosomes(enc.upper))
    mapping = Mapping(enc.decode(x))
    assert Mapping(enc.decode(enc.encode(mapping))).key() == mapping.key()
    canon = enc.canonical(x[None, :])[0]
    assert Mapping(enc.decode(canon)).key() == mapping.key()
    assert (enc.canonical(canon[None, :])[0] == canon).all()
    assert (0 <= canon).all() and (canon <= enc.upper).all()


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_load_balance_fitness_is_eq_3_1_to_3_4(problem, enc, data):
    model = ga.LoadBalanceModel.build(enc)
    x = data.draw(chromosomes(enc.upper))
    mapping = Mapping(enc.decode(x))
    # canonical form: layers point at group leaders, whose transfers stand for the group's
    want = eq_3_1_to_3_4(problem, enc.config, mapping)
    got = model.fitness(enc, enc.canonical(x[None, :]))[0]
    assert got == pytest.approx(want, rel=1e-9, abs=1e-15)


def test_published_defaults():
    assert ga.PUBLISHED["pop_size"] == 1000 and ga.PUBLISHED["epochs"] == 500
    assert ga.PUBLISHED["mutation"] == 0.05 and ga.PUBLISHED["stall"] == 50


def test_single_gene_mutation_changes_exactly_one_gene():
    upper = np.array([3, 3, 3, 1, 2])
    X = np.zeros((200, 5), dtype=np.int64)
    out = ga.SingleGeneMutation(upper, 1.0)._do(None, X, random_state=np.random.default_rng(0))
    assert ((out != X).sum(axis=1) == 1).all()
    assert (out <= upper).all()


def test_single_point_crossover_swaps_tails():
    X = np.stack([np.zeros((50, 8), dtype=np.int64), np.ones((50, 8), dtype=np.int64)])
    a, b = ga.SinglePoint(1.0)._do(None, X, random_state=np.random.default_rng(1))
    for ra, rb in zip(a, b):
        cut = int(np.argmax(ra))  # 0...0 1...1
        assert 1 <= cut < 8 and (ra[cut:] == 1).all() and (ra[:cut] == 0).all()
        assert (rb == 1 - ra).all()


def test_load_balance_ga_never_worse_than_its_seeds_in_its_fitness(problem, enc):
    res = ga.search(problem, seed=3, pop_size=60, epochs=40, stall=15, final="fitness")
    assert res.notes["returned"] == "ga"
    model = ga.LoadBalanceModel.build(enc)
    seeds = ga.baseline_seeds(problem, enc.config) | ga.pipeline_seeds(problem)
    seed_fitness = [model.fitness(enc, x[None, :])[0]
                    for m in seeds.values() if (x := enc.encode(m)) is not None]
    assert res.notes["runs"][0]["best_fitness"] <= min(seed_fitness) + 1e-15
    assert res.metrics.throughput == pytest.approx(res.notes["ga_best_throughput"])


@pytest.mark.parametrize("fitness", ["load_balance", "throughput"])
def test_returns_no_worse_than_greedy_and_pipeline(problem, fitness):
    res = ga.search(problem, seed=1, fitness=fitness, pop_size=24, epochs=8, stall=4)
    for name in ("greedy", "pipeline"):
        assert res.metrics.throughput >= get_strategy(name)(problem).metrics.throughput * (1 - 1e-9)
    assert res.metrics.throughput == pytest.approx(
        evaluate(problem, res.best, with_latency=False).throughput)


def test_deterministic_per_seed(problem):
    kw = dict(fitness="throughput", pop_size=16, epochs=8, stall=4)
    a, b = ga.search(problem, seed=5, **kw), ga.search(problem, seed=5, **kw)
    assert a.best.key() == b.best.key() and a.notes["runs"] == b.notes["runs"]


def test_runs_per_configuration(factory):
    els = [ProcessingElement("cpu0-1", "cpu", (0, 1), cluster="c", power_w=4.0),
           ProcessingElement("cpu0", "cpu", (0,), cluster="c", power_w=2.0),
           ProcessingElement("cpu1", "cpu", (1,), cluster="c", power_w=2.0)]
    p = factory.problem(6, els, seed=2)
    configs = configurations(p)
    assert len(configs) == 2
    res = ga.search(p, seed=0, fitness="throughput", pop_size=16, epochs=10, stall=5)
    assert len(res.notes["runs"]) == 2
    used = set(res.best.elements)
    assert any(used <= set(c) for c in configs)


def test_bad_options(problem):
    with pytest.raises(InputError, match="fitness"):
        ga.search(problem, fitness="speed")
    with pytest.raises(InputError, match="final"):
        ga.search(problem, final="best")
