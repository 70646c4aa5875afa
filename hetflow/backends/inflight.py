"""One thread keeping an element's lanes busy: up to k runs in flight (k runners, one run each),
finished in the order they were launched. Runners with the launch hooks (`submit`, `collect`;
see `base`) overlap; others run each frame as it is submitted, one at a time. A firing of a
batched runner (`submit_frames`) carries 1..batch frames and gives back a list of outputs.

Why one thread and not a thread per lane: on the H100 machine a thread per lane, all on the
GPU's driving core, ran a fast CNN's 16-24 lanes 5-20% slower and up to +-15% from one half
second to the next; one thread launching and collecting in order ran steadier and faster."""
from __future__ import annotations

from collections import deque
from typing import Any, Iterable, Mapping, Sequence

import numpy as np


def launches(runners: Iterable[Any]) -> bool:
    """Whether every runner has the launch hooks, so that their runs overlap."""
    return all(hasattr(r, "submit") for r in runners)


class InFlight:
    def __init__(self, runners: Sequence[Any]):
        self.free = deque(runners)
        # (runner, tag, outputs where run at once, whether it is a firing of submit_frames)
        self.busy: deque[tuple[Any, Any, Any, bool]] = deque()
        self.launches = launches(runners)

    def __len__(self) -> int:
        """Runs in flight."""
        return len(self.busy)

    def has_room(self) -> bool:
        return bool(self.free)

    def submit(self, feeds: Mapping[str, np.ndarray], tag: Any = None) -> None:
        """Launch a run on a free lane (there must be one); `tag` comes back with its outputs."""
        r = self.free.popleft()
        if self.launches:
            r.submit(feeds)
            self.busy.append((r, tag, None, False))
        else:
            self.busy.append((r, tag, r.run(feeds), False))

    def submit_frames(self, frames: Sequence[Mapping[str, np.ndarray]], tag: Any = None) -> None:
        """Launch one firing of 1..batch frames on a free lane (there must be one); `collect`
        gives `tag` and the list of their outputs."""
        r = self.free.popleft()
        if self.launches:
            r.submit_frames(frames)
            self.busy.append((r, tag, None, True))
        else:
            self.busy.append((r, tag, r.run_frames(frames), True))

    def wait(self) -> None:
        """Wait for the oldest run in flight to complete (`collect` then does not wait)."""
        r, _, out, _ = self.busy[0]
        if out is None:
            r.wait()

    def collect(self) -> tuple[Any, Any]:
        """Wait for the oldest run in flight: (its tag, its outputs: a dict, or a list of them
        for a firing of `submit_frames`)."""
        r, tag, out, framed = self.busy.popleft()
        try:
            if out is not None:
                return tag, out
            return tag, (r.collect_frames() if framed else r.collect())
        finally:
            self.free.append(r)
