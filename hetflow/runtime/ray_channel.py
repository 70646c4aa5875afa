"""A channel between Ray actors: the firing loop's `Channel` across processes and nodes.

Each actor holds its own end of a channel (`RayChannel`). The producer's end sends frame f's
item to the consumer member that takes f (a Ray actor call, so the tensor goes from node to node
through Ray's object store); the consumer's end keeps the items it was sent, by frame, until its
loop takes them. The window is the local engine's (`FrameChannel`): frame f may be sent only
while f < (lowest frame not yet taken) + capacity, counted over every consumer member, which
keeps the lowest frame in flight free to move on however frames are dispatched. The consumer's
end tells every producer member of each frame it takes (a credit), and each producer's end keeps
the same count of frames taken: its view of the window lags the consumer's, so it never sends
more than the window holds.

A frame's route, the members that take it in the groups the driver dispatches dynamically
(`Routes`), travels with its tensors: an actor learns it from what it receives of the frame and
passes it on with what it sends.
"""
from __future__ import annotations

import collections
import threading
from typing import Any, Callable

from hetflow.runtime.channel import window_start
from hetflow.runtime.harness import POLL, Control, Stopped


class Routes:
    """One actor's view of the frames it handles: each frame's route (a tuple, one member per
    dynamically dispatched group), held until the actor has sent every tensor of the frame; and,
    for a member of such a group, the frames the driver gave it, in order."""

    def __init__(self, sends_per_frame: int) -> None:
        self.sends = max(1, sends_per_frame)
        self.route: dict[int, tuple[int, ...]] = {}
        self.left: dict[int, int] = {}  # frame -> its sends still to make here
        self.mine: collections.deque[int] = collections.deque()
        self.closed = False  # the driver gave its last frame
        self.cond = threading.Condition()

    def learn(self, f: int, route: tuple[int, ...] | None) -> None:
        """Frame f's route, from what the actor receives of it before its last send (a tensor
        received after it would bring back a route nobody forgets)."""
        if route is not None and f not in self.route:
            self.route[f] = route
            self.left[f] = self.sends

    def member(self, f: int, group: int) -> int:
        return self.route[f][group]

    def sent(self, f: int) -> tuple[int, ...] | None:
        """The route to send on with frame f's tensor (forgotten after the frame's last send)."""
        route = self.route.get(f)
        if route is not None:
            self.left[f] -= 1
            if not self.left[f]:
                del self.route[f], self.left[f]
        return route

    def give(self, frames: list[int], last: bool) -> None:
        with self.cond:
            self.mine.extend(frames)
            self.closed = self.closed or last
            self.cond.notify_all()

    def take(self, control: Control, me: str) -> int | None:
        """The next frame the driver gave this member (waiting for one), None when no more
        comes or the run stopped."""
        with self.cond:
            while not self.mine and not self.closed:
                if control.stop.is_set():
                    return None
                control.waiting[me] = "the driver's next frame for it"
                self.cond.wait(POLL)
            return self.mine.popleft() if self.mine else None


class RayChannel:
    """One actor's end of channel `name` (the loop's `Channel`): `try_put` sends to the consumer
    member that takes the frame (`to(f)`: its actor handle) once the window has room; `try_get`
    takes what a producer sent (`receive`), crediting every producer (`producers`)."""

    def __init__(self, name: str, capacity: int, to: Callable[[int], Any] | None,
                 producers: list[Any], routes: Routes | None):
        self.name, self.capacity = name, max(1, capacity)
        # routes: where the frame's route is learnt from what this end receives (None where
        # the actor sends nothing more of the frame after it) and passed on with what it sends
        self.to, self.producers, self.routes = to, producers, routes
        self.items: dict[int, Any] = {}  # the consumer's end: frames received, not yet taken
        self.low = 0  # lowest frame not yet taken (on the producer's end: as last credited)
        self.taken: set[int] = set()
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)  # a frame came, or the window moved
        self.listeners: list[threading.Event] = []

    def listen(self, wake: threading.Event) -> None:
        self.listeners.append(wake)

    def _notify(self) -> None:
        self.changed.notify_all()
        for ev in self.listeners:
            ev.set()

    # ---- the producer's end ----
    def has_room(self, f: int) -> bool:
        return f < self.low + self.capacity

    def try_put(self, f: int, item: Any) -> bool:
        if f >= self.low + self.capacity:
            return False
        self.to(f).put.remote(self.name, f, item, self.routes.sent(f) if self.routes else None)
        return True

    def wait_space(self, f: int, timeout: float) -> bool:
        with self.lock:
            if f >= self.low + self.capacity:
                self.changed.wait(timeout)
            return f < self.low + self.capacity

    def credit(self, f: int) -> None:
        """A consumer member took frame f."""
        with self.lock:
            low, self.low = self.low, window_start(self.taken, self.low, f)
            if self.low != low:
                self._notify()

    # ---- the consumer's end ----
    def receive(self, f: int, item: Any, route: tuple[int, ...] | None) -> None:
        if self.routes is not None:
            self.routes.learn(f, route)
        with self.lock:
            self.items[f] = item
            self._notify()

    def has(self, f: int) -> bool:
        return f in self.items

    def try_get(self, f: int) -> tuple[bool, Any]:
        with self.lock:
            if f not in self.items:
                return False, None
            item = self.items.pop(f)
        for p in self.producers:
            p.credit.remote(self.name, f)
        return True, item

    def wait_for(self, f: int, timeout: float) -> bool:
        with self.lock:
            if f not in self.items:
                self.changed.wait(timeout)
            return f in self.items


class Inputs:
    """The model inputs the driver hands an actor that reads them, by frame: the loop's frame
    source (`get(f)` waits for frame f)."""

    def __init__(self, control: Control, me: str, routes: Routes | None):
        self.control, self.me, self.routes = control, me, routes
        self.frames: dict[int, dict[str, Any]] = {}
        self.cond = threading.Condition()

    def give(self, batch: list[tuple[int, dict[str, Any], tuple[int, ...] | None]]) -> None:
        with self.cond:
            for f, tensors, route in batch:
                if self.routes is not None:
                    self.routes.learn(f, route)
                self.frames[f] = tensors
            self.cond.notify_all()

    def get(self, f: int) -> dict[str, Any]:
        with self.cond:
            while f not in self.frames:
                if self.control.stop.is_set():
                    raise Stopped
                self.control.waiting[self.me] = f"frame {f} from the driver"
                self.cond.wait(POLL)
            self.control.waiting[self.me] = "running"
            return self.frames.pop(f)
