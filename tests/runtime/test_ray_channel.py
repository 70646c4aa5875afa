"""The Ray channel's window and credits without Ray (`runtime.ray_channel`): producer and
consumer members of random replica groups exchange frames through `RayChannel` ends whose actor
calls are messages delivered late and out of order; every frame reaches the member that takes
it, none is sent beyond the window over what the consumers took, and the lowest frame in flight
can always move on (no schedule deadlocks)."""
import random

from hypothesis import given, settings, strategies as st

from hetflow.runtime.ray_channel import RayChannel, Routes


class Calls:
    """Actor calls in flight: delivered later, in any order."""

    def __init__(self, rng: random.Random):
        self.rng, self.pending = rng, []

    def deliver_one(self) -> bool:
        if not self.pending:
            return False
        self.pending.pop(self.rng.randrange(len(self.pending)))()
        return True


class Method:
    def __init__(self, calls: Calls, fn):
        self.calls, self.fn = calls, fn

    def remote(self, *args):
        self.calls.pending.append(lambda: self.fn(*args))


class FakeActor:
    """An actor handle whose `put` and `credit` reach one channel end."""

    def __init__(self, calls: Calls):
        self.end: RayChannel | None = None
        self.put = Method(calls, lambda name, f, item, route: self.end.receive(f, item, route))
        self.credit = Method(calls, lambda name, f: self.end.credit(f))


@settings(max_examples=200, deadline=None)
@given(producers=st.integers(1, 3), consumers=st.integers(1, 3), capacity=st.integers(1, 4),
       frames=st.integers(1, 30), seed=st.integers(0, 10 ** 6))
def test_frames_reach_their_consumer_within_the_window_without_deadlock(
        producers, consumers, capacity, frames, seed):
    rng = random.Random(seed)
    calls = Calls(rng)
    by_producer = [rng.randrange(producers) for _ in range(frames)]
    by_consumer = [rng.randrange(consumers) for _ in range(frames)]
    p_actors = [FakeActor(calls) for _ in range(producers)]
    c_actors = [FakeActor(calls) for _ in range(consumers)]
    for a in p_actors:
        a.end = RayChannel("c", capacity, lambda f: c_actors[by_consumer[f]], [], None)
    for a in c_actors:
        a.end = RayChannel("c", capacity, None, p_actors, None)
    # each member goes through its own frames in order, as a worker's loop does
    to_send = [[f for f in range(frames) if by_producer[f] == j] for j in range(producers)]
    to_take = [[f for f in range(frames) if by_consumer[f] == j] for j in range(consumers)]
    taken: set[int] = set()
    while any(to_send) or any(to_take) or calls.pending:
        moves = [("send", j) for j, fs in enumerate(to_send)
                 if fs and p_actors[j].end.has_room(fs[0])]
        moves += [("take", j) for j, fs in enumerate(to_take) if fs and c_actors[j].end.has(fs[0])]
        if calls.pending:
            moves.append(("deliver", 0))
        assert moves, f"deadlock: to send {to_send}, to take {to_take}"
        kind, j = rng.choice(moves)
        if kind == "send":
            f = to_send[j].pop(0)
            low = min(set(range(frames)) - taken)
            assert f < low + capacity  # a producer's view of the window lags the consumers'
            assert p_actors[j].end.try_put(f, ("tensor", f))
        elif kind == "take":
            f = to_take[j].pop(0)
            assert c_actors[j].end.try_get(f) == (True, ("tensor", f))
            taken.add(f)
        else:
            calls.deliver_one()
    assert taken == set(range(frames))
    assert all(not a.end.items for a in c_actors)


def test_a_route_is_passed_on_until_the_frames_last_send():
    routes = Routes(sends_per_frame=2)
    routes.learn(4, (1, 0))
    assert routes.member(4, 0) == 1 and routes.member(4, 1) == 0
    assert routes.sent(4) == (1, 0) and routes.sent(4) == (1, 0)
    assert 4 not in routes.route and routes.sent(4) is None  # forgotten after the last send


def test_a_dynamic_member_takes_the_frames_the_driver_gave_it_until_the_last():
    import threading

    from hetflow.runtime.harness import Control

    routes, control = Routes(sends_per_frame=1), Control()
    routes.give([0, 3], last=False)
    got = [routes.take(control, "pe0"), routes.take(control, "pe0")]
    later = []
    t = threading.Thread(target=lambda: later.extend([routes.take(control, "pe0"),
                                                      routes.take(control, "pe0")]))
    t.start()  # it waits for the driver's next frame
    routes.give([5], last=True)
    t.join(5)
    assert not t.is_alive() and got == [0, 3] and later == [5, None]


def test_a_waiting_member_ends_at_the_stop():
    from hetflow.runtime.harness import Control

    routes, control = Routes(sends_per_frame=1), Control()
    control.stop.set()
    assert routes.take(control, "pe0") is None
