"""Channels between workers: frame-indexed items in a bounded window.

`Channel` is what the firing loop (`runtime.loop`) needs of one: non-blocking `try_get` /
`try_put`, the checks `has` / `has_room`, bounded waits `wait_for` / `wait_space`, and `listen`
for a thread that drives several lanes. `FrameChannel` is the in-process one (threads hand
references over); a channel between processes or Ray workers would implement the same methods.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Protocol

from hetflow.runtime.harness import POLL, Control, Stopped


class Channel(Protocol):
    name: str

    def try_get(self, f: int) -> tuple[bool, Any]: ...

    def try_put(self, f: int, item: Any) -> bool: ...

    def has(self, f: int) -> bool: ...

    def has_room(self, f: int) -> bool: ...

    def wait_for(self, f: int, timeout: float) -> bool: ...

    def wait_space(self, f: int, timeout: float) -> bool: ...

    def listen(self, wake: threading.Event) -> None: ...


def window_start(taken: set[int], low: int, f: int) -> int:
    """The lowest frame not yet taken, once frame f is: `low` before, `taken` the frames above
    it already taken (updated in place). A channel's window of frames starts there."""
    taken.add(f)
    while low in taken:
        taken.discard(low)
        low += 1
    return low


class FrameChannel:
    """A bounded channel of frame-indexed items: `put(f, x)`, `get(f)`.

    Items are taken by frame index, so any member of a replica group may produce or consume any
    frame and the consumer still sees frames in its own order. The bound is a window: frame f can
    be put only while f < (lowest frame not yet taken) + capacity. The lowest frame in flight can
    therefore always move on, which keeps the pipeline free of deadlock however frames are
    dispatched to members. A consumer waits on an event of its own frame, so a put wakes only
    the thread that wants it (many idle replicas must not all wake for every frame).
    """

    def __init__(self, name: str, capacity: int):
        self.name, self.capacity = name, max(1, capacity)
        self.items: dict[int, Any] = {}
        self.low = 0  # lowest frame not yet taken
        self.taken: set[int] = set()
        self.lock = threading.Lock()
        self.space = threading.Condition(self.lock)  # producers wait here for the window
        self.wanted: dict[int, threading.Event] = {}  # frame -> event of the waiting consumer
        # events of threads that drive several lanes: set on every put and every move of the
        # window, so such a thread waits for whichever of its lanes can go on
        self.listeners: list[threading.Event] = []

    def listen(self, wake: threading.Event) -> None:
        """Set `wake` on every put and every move of the window."""
        self.listeners.append(wake)

    def put(self, f: int, item: Any, control: Control, element: str, what: str) -> None:
        if self.try_put(f, item):
            return
        control.waiting[element] = what
        while not self.try_put(f, item):
            if control.stop.is_set():
                raise Stopped
            self.wait_space(f, POLL)
        control.waiting[element] = "running"

    def try_put(self, f: int, item: Any) -> bool:
        """Put frame f's item if the window has room for it (never waits)."""
        with self.lock:
            if f >= self.low + self.capacity:
                return False
            self.items[f] = item
            ev = self.wanted.pop(f, None)
        if ev is not None:
            ev.set()
        for ev in self.listeners:
            ev.set()
        return True

    def has_room(self, f: int) -> bool:
        return f < self.low + self.capacity

    def has(self, f: int) -> bool:
        return f in self.items

    def wait_space(self, f: int, timeout: float) -> bool:
        with self.lock:
            if f >= self.low + self.capacity:
                self.space.wait(timeout)
            return f < self.low + self.capacity

    def try_get(self, f: int) -> tuple[bool, Any]:
        with self.lock:
            if f not in self.items:
                return False, None
            item = self.items.pop(f)
            low, self.low = self.low, window_start(self.taken, self.low, f)
            if self.low != low:
                self.space.notify_all()
                for ev in self.listeners:
                    ev.set()
            return True, item

    def wait_for(self, f: int, timeout: float) -> bool:
        with self.lock:
            if f in self.items:
                return True
            ev = self.wanted.setdefault(f, threading.Event())
        return ev.wait(timeout)

    def get(self, f: int, control: Control, element: str, what: str) -> Any:
        ok, item = self.try_get(f)
        if ok:
            return item
        control.waiting[element] = what
        while True:
            if control.stop.is_set():
                raise Stopped
            self.wait_for(f, POLL)
            ok, item = self.try_get(f)
            if ok:
                control.waiting[element] = "running"
                return item


class QueueChannel(FrameChannel):
    """A channel between two processes, each holding a copy: the producer's puts items to the
    consumer (`post_item(f, item)`, a message to its process), the consumer's takes tell the
    producer where its window starts (`post_low(low)`). What a process hears from the other
    arrives through `arrived` and `moved` (its thread that reads its messages). The window is
    the consumer's: the producer sees it as last told, never ahead of it, so an item it puts
    always fits the consumer's window."""

    def __init__(self, name: str, capacity: int, post_item: Callable[[int, Any], None],
                 post_low: Callable[[int], None]):
        super().__init__(name, capacity)
        self.post_item, self.post_low = post_item, post_low

    def try_put(self, f: int, item: Any) -> bool:  # the producer's side
        if f >= self.low + self.capacity:
            return False
        self.post_item(f, item)
        return True

    def try_get(self, f: int) -> tuple[bool, Any]:  # the consumer's side
        low = self.low
        got = super().try_get(f)
        if self.low != low:
            self.post_low(self.low)
        return got

    def arrived(self, f: int, item: Any) -> None:
        """The producer put frame f's item (the consumer's side)."""
        if not super().try_put(f, item):
            raise RuntimeError(f"channel {self.name}: frame {f} came beyond the window")

    def moved(self, low: int) -> None:
        """The consumer's window starts at `low` now (the producer's side)."""
        with self.lock:
            if low <= self.low:
                return
            self.low = low
            self.space.notify_all()
        for ev in self.listeners:
            ev.set()
