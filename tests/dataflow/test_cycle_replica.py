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
