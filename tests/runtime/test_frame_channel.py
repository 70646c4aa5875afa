"""FrameChannel: items by frame index, a window anchored at the lowest frame not yet taken."""
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

from hetflow.plan.mapping import weighted_pattern
from hetflow.runtime.engine import FrameChannel
from hetflow.runtime.harness import Control, Stopped


def test_window_blocks_until_the_lowest_frame_is_taken():
    ch, sh = FrameChannel("c", 2), Control()
    ch.put(0, "a", sh, "p", "w")
    ch.put(1, "b", sh, "p", "w")
    done = threading.Event()

    def late_put():
        ch.put(2, "c", sh, "p", "w")  # outside the window [0, 2) until frame 0 is taken
        done.set()

    threading.Thread(target=late_put, daemon=True).start()
    time.sleep(0.2)
    assert not done.is_set()
    assert ch.get(1, sh, "q", "w") == "b"  # taking frame 1 first does not move the window
    time.sleep(0.2)
    assert not done.is_set()
    assert ch.get(0, sh, "q", "w") == "a"
    assert done.wait(2.0)
    assert ch.get(2, sh, "q", "w") == "c"


def test_stop_releases_a_blocked_consumer():
    ch, sh = FrameChannel("c", 1), Control()
    threading.Timer(0.1, sh.stop.set).start()
    with pytest.raises(Stopped):
        ch.get(5, sh, "q", "w")


@settings(max_examples=60, deadline=None)
@given(times=st.lists(st.floats(0.01, 10.0), min_size=1, max_size=8))
def test_weighted_pattern_shares_follow_speeds(times):
    p = weighted_pattern(times)
    assert set(p) == set(range(len(times)))  # every member gets frames
    rates = [1 / t for t in times]
    # the group's rate with these shares is within 15% of the sum of the members' rates
    # (the pattern is at most 64 long, and every member takes at least one frame)
    group = min(len(p) * r / p.count(m) for m, r in enumerate(rates))
    ideal = sum(rates)
    slowest_forced = len(times) * max(times)  # one frame each bounds how far shares can skew
    assert group >= min(0.85 * ideal, len(p) / slowest_forced * 0.999)


def test_listeners_wake_on_every_put_and_every_move_of_the_window():
    import threading

    ch, wake = FrameChannel("c", 1), threading.Event()
    ch.listen(wake)
    assert ch.try_put(0, "a") and wake.is_set()
    wake.clear()
    assert not ch.try_put(1, "b") and not wake.is_set()  # no room: nothing changed
    assert ch.try_get(1) == (False, None) and not wake.is_set()
    assert ch.try_get(0) == (True, "a") and wake.is_set()  # the window moved: room for 1
    assert ch.has_room(1) and not ch.has(1)


def test_the_frame_channel_has_every_method_the_firing_loop_needs():
    from hetflow.runtime.channel import Channel

    needed = [m for m in vars(Channel) if not m.startswith("_")]
    assert {"try_get", "try_put", "has", "has_room", "wait_for", "wait_space", "listen"} <= set(needed)
    assert all(callable(getattr(FrameChannel("c", 1), m)) for m in needed)


def queue_pair(capacity: int):
    """A QueueChannel's two copies, producer's and consumer's, joined by two lists of
    messages (as the process engine joins them through each process's queue)."""
    from hetflow.runtime.channel import QueueChannel

    to_consumer, to_producer = [], []
    producer = QueueChannel("c", capacity, lambda f, x: to_consumer.append((f, x)),
                            lambda low: to_producer.append(low))
    consumer = QueueChannel("c", capacity, lambda f, x: to_consumer.append((f, x)),
                            lambda low: to_producer.append(low))

    def deliver() -> None:  # what each process's message thread does
        while to_consumer:
            consumer.arrived(*to_consumer.pop(0))
        while to_producer:
            producer.moved(to_producer.pop(0))

    return producer, consumer, deliver


@settings(max_examples=50, deadline=None)
@given(capacity=st.integers(1, 4), frames=st.integers(1, 12),
       moves=st.lists(st.sampled_from(["put", "take", "deliver"]), max_size=60))
def test_queue_channel_copies_keep_the_window_of_one_channel(capacity, frames, moves):
    """Whatever order the producer puts, the consumer takes and the messages between the two
    copies arrive, the producer's copy never lets a frame beyond the consumer's window, every
    item arrives once and in its frame, and a taken frame frees room in the producer's copy
    once its message arrives (the frames all pass)."""
    producer, consumer, deliver = queue_pair(capacity)
    put = taken = 0

    def step(move: str) -> None:
        nonlocal put, taken
        if move == "put" and put < frames:
            fits = put < producer.low + capacity
            assert producer.try_put(put, f"x{put}") == fits
            put += fits
        elif move == "take":
            ok, item = consumer.try_get(taken)
            if ok:
                assert item == f"x{taken}"
                taken += 1
        elif move == "deliver":
            deliver()
        assert producer.low <= consumer.low == taken
        assert put <= consumer.low + capacity  # never beyond the consumer's window

    for move in moves:
        step(move)
    for _ in range(3 * frames + 3):  # then every frame passes
        for move in ("deliver", "put", "take"):
            step(move)
    assert taken == frames
