"""Replicated stages take whole frames (phase cycles) in turn: a frame's phases run one after
another on one replica, unlike replicas taking single firings in turn."""
from hetflow.dataflow.analysis import latency, throughput_mcr
from hetflow.dataflow.graphs import Actor, Channel, CsdfGraph


def graph(rule):
    attrs = {"replicate": rule} if rule else {}
    # b: two phases of 1 s, two replicas; a feeds phase 0, c reads phase 1
    return CsdfGraph("g", [Actor("a", [0.5]), Actor("b", [1.0, 1.0], concurrency=2, attrs=attrs),
                           Actor("c", [0.5])],
                     [Channel("ab", "a", "b", [1], [1, 0]), Channel("bc", "b", "c", [0, 1], [1])])


def test_cycle_replicas_run_a_frames_phases_in_sequence():
    # one frame alone: a (0.5) -> b phase 0 (1) -> b phase 1 (1) -> c (0.5)
    assert latency(graph("cycle")).isolated == 3.0
    # replicating single firings would let phase 1 start before phase 0 of its frame ends
    assert latency(graph(None)).isolated < 3.0


def test_cycle_replicas_double_the_stage_rate():
    # b needs 2 s per frame on one replica; two replicas: 1 frame/s; a and c allow 2/s
    assert abs(throughput_mcr(graph("cycle")).throughput - 1.0) < 1e-9


def test_cycle_c_starts_after_cycle_c_minus_1_starts_not_after_its_last_phase():
    # worked by hand: k replicas of an actor whose cycle takes T seconds deliver one cycle
    # every T / k seconds (replica r runs cycles r, r + k, ...; cycle c may start as soon as
    # cycle c - 1 started and replica c mod k is free)
    four = CsdfGraph("g", [Actor("b", [1, 1, 1, 1], concurrency=4, attrs={"replicate": "cycle"})],
                     [])
    assert abs(throughput_mcr(four).period - 1.0) < 1e-9  # 4 s cycle on 4 replicas
    two = CsdfGraph("g", [Actor("b", [3, 1], concurrency=2, attrs={"replicate": "cycle"})], [])
    assert abs(throughput_mcr(two).period - 2.0) < 1e-9  # 4 s cycle on 2 replicas


def test_cycle_replicas_behind_a_slow_producer_follow_it():
    # a (2 s) feeds phase 0 of b (cycle [1, 1] on 2 replicas, 1 frame/s alone): a bounds it
    g = CsdfGraph("g", [Actor("a", [2.0]),
                        Actor("b", [1.0, 1.0], concurrency=2, attrs={"replicate": "cycle"})],
                  [Channel("ab", "a", "b", [1], [1, 0])])
    assert abs(throughput_mcr(g).period - 2.0) < 1e-9
    # a fast producer (0.25 s): b's two replicas give one cycle per second
    g.actors[0].exec_times = [0.25]
    assert abs(throughput_mcr(g).period - 1.0) < 1e-9
