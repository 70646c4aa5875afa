"""Replicated stages take whole frames (phase cycles) in turn: a frame's phases run one after
another on one replica, unlike replicas taking single firings in turn."""
from hetflow.dataflow.analysis import latency, throughput_mcr, throughput_simulation
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


def replicated(times, k):
    return Actor("b", times, concurrency=k, attrs={"replicate": "cycle"})


def both_periods(g):
    return throughput_mcr(g).period, throughput_simulation(g).period


def test_cycle_c_waits_for_the_start_of_cycle_c_minus_1_not_its_last_phase():
    # four replicas, four 1 s phases: cycle c starts at c (after cycle c - 1 starts; cycle
    # c - 4 on the same replica ended at c); one frame a second
    g = CsdfGraph("g", [replicated([1, 1, 1, 1], 4)], [])
    assert both_periods(g) == (1.0, 1.0)


def test_uneven_phases_on_two_replicas():
    # [3, 1] on 2: cycle 0 on replica 0 at 0..4, cycle 1 on replica 1 at 0..4, cycle 2 waits for
    # cycle 0 to end (4): two frames per 4 s
    g = CsdfGraph("g", [replicated([3, 1], 2)], [])
    assert both_periods(g) == (2.0, 2.0)
    # with one replica the cycle is simply sequential
    assert both_periods(CsdfGraph("g", [replicated([3, 1], 1)], [])) == (4.0, 4.0)


def test_replicas_behind_a_bounded_channel_with_a_transfer_time():
    # a (1 s) sends one token a frame to phase 0 of b (four 1 s phases, four replicas) through a
    # FIFO of one token, visible 0.5 s after a ends. a's firing n needs token n - 1 taken, i.e.
    # b's cycle n - 1 started, which started 0.5 s after a's firing n - 1 ended: 1.5 s a frame.
    # (Waiting for the start of cycle n - 1's *last* phase would give 3 s.)
    g = CsdfGraph("g", [Actor("a", [1.0]), replicated([1, 1, 1, 1], 4)],
                  [Channel("ab", "a", "b", [1], [1, 0, 0, 0], capacity=1, transfer_time=0.5)])
    assert both_periods(g) == (1.5, 1.5)
    lat = latency(g)
    # one frame alone: a 0..1, transfer to 1.5, b's phases 1.5..5.5
    assert lat.isolated == 5.5
    # in the regime every frame sees the same: a starts as soon as b took the previous token
    assert lat.steady == 5.5


def test_tokens_leave_a_replica_group_in_frame_order():
    # b: [1, 3] on two replicas, phase 0 emits the frame's token; c takes it at once (0 s).
    # Cycle 1's phase 0 ends at 1 but its token waits for cycle 0 to end (4): tokens of one
    # actor are delivered in firing order (hsdf.py), so the two methods must look back over the
    # replicas' cycles alike. Cycles start at 0, 0, 4, 4, ...: 2 s a frame.
    g = CsdfGraph("g", [replicated([1, 3], 2), Actor("c", [0.0])],
                  [Channel("bc", "b", "c", [1, 0], [1])])
    assert both_periods(g) == (2.0, 2.0)
