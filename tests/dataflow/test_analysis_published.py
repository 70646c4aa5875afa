"""Graphs whose repetition vector or throughput is published, with the source of each value.

Where the source's semantics differ from hetflow's (graphs.py), the graph is translated so
that both mean the same thing; the translation is explained at each case.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from hetflow.dataflow.analysis import (check_liveness, repetition_vector, throughput_mcr,
                                       throughput_simulation)
from hetflow.dataflow.graphs import Actor, Channel, CsdfGraph
from hetflow.dataflow.sdf3 import read_sdf3
from hetflow.errors import DeadlockError

BOTH = [throughput_mcr, throughput_simulation]


# Kiter (github.com/bbodin/kiter), tests/helpers/sample.h: generateSampleCycle() and
# generateSampleMultSCC(); expected self-timed periods in tests/SymbolicExecutionTest.cpp:
# "Looking for (Period:23)" and "(Period:12)". Kiter's actors have reentrancy factor 1
# (= concurrency 1); setEdgeInPhases are production rates, setEdgeOutPhases consumption rates,
# setPreload the initial tokens.
def kiter_cycle_sample() -> CsdfGraph:
    return CsdfGraph("cycle_sample",
                     [Actor("A", [3, 1]), Actor("B", [2, 1, 2]), Actor("C", [1])],
                     [Channel("channel_1", "A", "B", [3, 5], [1, 1, 4]),
                      Channel("channel_2", "B", "C", [6, 2, 1], [6]),
                      Channel("channel_3", "C", "A", [2], [1, 3], 4)])


def kiter_mult_scc_sample() -> CsdfGraph:
    return CsdfGraph("mult_scc_sample",
                     [Actor("A", [1, 1]), Actor("B", [1, 1, 1]), Actor("C", [1]),
                      Actor("D", [1])],
                     [Channel("channel_1", "A", "B", [3, 5], [1, 1, 4]),
                      Channel("channel_2", "C", "A", [2], [1, 3], 4),
                      Channel("channel_3", "A", "D", [3, 5], [24], 13),
                      Channel("channel_4", "D", "C", [36], [6], 6)])


def kiter_buffered(g: CsdfGraph, sizes: list[int]) -> CsdfGraph:
    """Kiter's storage distributions free space when the consumer *ends* its firing (see
    actor.cpp, execEnd), hetflow's capacities when it starts; so we model Kiter's buffer of
    size s as an explicit reverse channel consumer -> producer with s - preload tokens."""
    reverse = [Channel(f"space_{c.name}", c.dst, c.src, list(c.consumption), list(c.production),
                       size - c.initial_tokens) for c, size in zip(g.channels, sizes)]
    return CsdfGraph(g.name, g.actors, g.channels + reverse)


@pytest.mark.parametrize("method", BOTH)
def test_kiter_cycle_sample_period_23(method):
    g = kiter_cycle_sample()
    # 8 tokens per cycle of A against 6 per cycle of B: 3 cycles of A, 4 of B, 6 of C.
    assert repetition_vector(g) == {"A": 6, "B": 12, "C": 6}
    assert method(g).period == pytest.approx(23, rel=1e-12)


@pytest.mark.parametrize("method", BOTH)
def test_kiter_mult_scc_sample_period_12(method):
    assert method(kiter_mult_scc_sample()).period == pytest.approx(12, rel=1e-12)


# Same file, test_storage_dependency_computation: buffer sizes (8, 9, 5) give period 25 and
# (3, 7, 5) deadlock on the cycle sample; (9, 4, 25, 36) give period 13 and (7, 4, 25, 36)
# deadlock on the multi-SCC sample.
@pytest.mark.parametrize("method", BOTH)
@pytest.mark.parametrize("sample,sizes,period", [
    (kiter_cycle_sample, [8, 9, 5], 25), (kiter_mult_scc_sample, [9, 4, 25, 36], 13)])
def test_kiter_storage_distributions_periods(method, sample, sizes, period):
    assert method(kiter_buffered(sample(), sizes)).period == pytest.approx(period, rel=1e-12)


@pytest.mark.parametrize("sample,sizes", [(kiter_cycle_sample, [3, 7, 5]),
                                          (kiter_mult_scc_sample, [7, 4, 25, 36])])
def test_kiter_storage_distributions_deadlock(sample, sizes):
    with pytest.raises(DeadlockError, match="space_channel_1"):
        check_liveness(kiter_buffered(sample(), sizes))


# The CD-to-DAT sample-rate converter (44.1 kHz -> 48 kHz): rates 1:1, 2:3, 2:7, 8:7, 5:1 give
# the repetition vector (147, 147, 98, 28, 32, 160) published by Bhattacharyya, Murthy and Lee
# (e.g. "Software Synthesis from Dataflow Graphs", Kluwer 1996). Execution times and the one-token
# self-loops are those of SDF3's benchmark sdf/testbench/samplerate.xml; the self-loop of f
# (160 firings of 6 time units) bounds the period to 960, the ASAP throughput 0.00104167 that
# Kiter's runres.txt lists for its copy of that benchmark (one_samplerate.xml).
def cd_to_dat() -> CsdfGraph:
    names, times = "abcdef", [5, 2, 3, 1, 4, 6]
    rates = [(1, 1), (2, 3), (2, 7), (8, 7), (5, 1)]
    actors = [Actor(n, [float(t)], concurrency=None) for n, t in zip(names, times)]
    channels = [Channel(f"ch{i + 1}", names[i], names[i + 1], [p], [c])
                for i, (p, c) in enumerate(rates)]
    channels += [Channel(f"self_{n}", n, n, [1], [1], 1) for n in names]
    return CsdfGraph("samplerate", actors, channels)


def test_cd_to_dat_repetition_vector():
    assert repetition_vector(cd_to_dat()) == {"a": 147, "b": 147, "c": 98, "d": 28, "e": 32,
                                              "f": 160}


@pytest.mark.parametrize("method", BOTH)
def test_cd_to_dat_period(method):
    assert method(cd_to_dat()).period == pytest.approx(960, rel=1e-12)


def test_cd_to_dat_critical_actor_is_f():
    assert throughput_mcr(cd_to_dat()).critical == ["f"]


# Kiter's README: `kiter -f benchmarks/IB5CSDF/BlackScholes.xml -aKPeriodicThroughput` prints
# "Maximum period is 42053349". The file is not part of hetflow; point HETFLOW_KITER_BENCHMARKS
# at Kiter's benchmarks/ folder to run this check.
@pytest.mark.skipif(not os.environ.get("HETFLOW_KITER_BENCHMARKS"),
                    reason="HETFLOW_KITER_BENCHMARKS (Kiter's benchmarks folder) not set")
def test_kiter_blackscholes_period():
    path = Path(os.environ["HETFLOW_KITER_BENCHMARKS"]) / "IB5CSDF" / "BlackScholes.xml"
    g = read_sdf3(path, time_unit=1.0)
    assert throughput_mcr(g).period == 42053349
