"""What every backend offers: `prepare` a sub-network for one processing element, then `run` it.

A backend is chosen per element (ONNX Runtime for CPU groups, PyTorch for CUDA GPUs, ...). A
`Runner` is bound to one sub-network on one element; the caller owns the thread that calls `run`
and pins it (see `hetflow.backends.affinity.pin_current_thread` and `Runner.caller_cores`).

Optional timing hooks the profiler uses when a runner has them (device backends):
`benchmark(feeds, repeats=, warmup=) -> list[seconds]`, or `replay()`: one run of the device
work on the inputs staged by the last `run`, border copies excluded (those are priced by the
profile's communication model).

Optional launch hooks of device runners, so that one thread can keep several lanes' runs in
flight: `submit(feeds)` launches a run and returns at once, `finished()` says whether it is
done, `wait()` waits for it, `collect()` waits and returns its outputs (`run` = submit +
collect). A runner keeps one run in flight. Lanes of a runner without them run one at a time.

Batches: every runner has `batch` (1 for a plain runner) and `run_frames(frames)`: 1..batch
frames (leading dim 1 each) in one run, padded to `batch` with copies of the last frame, their
outputs split back (leading dim 1 each; the padding's dropped); a runner with the launch hooks
also has `submit_frames(frames)` and `collect_frames()`. `prepare(..., batch=b)` builds one
(`hetflow.backends.batching`).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Protocol, runtime_checkable

import numpy as np

from hetflow.errors import BackendError

if TYPE_CHECKING:
    from hetflow.model.subnet import Subnet
    from hetflow.platform.spec import ProcessingElement


@runtime_checkable
class Runner(Protocol):
    inputs: list[str]
    outputs: list[str]

    @property
    def caller_cores(self) -> tuple[int, ...]:
        """Cores the thread calling `run` should be pinned to."""
        ...

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Tensors named in `inputs` -> tensors named in `outputs` (host numpy arrays)."""
        ...

    def close(self) -> None:
        ...


class Backend(ABC):
    name: ClassVar[str]
    kinds: ClassVar[tuple[str, ...]]  # element kinds it can run on
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)  # element precisions it can run
    # raised where a change makes the backend's runs time differently: a profile records it for
    # each element, and one made at another revision is not reused (`bench.profiles`)
    revision: ClassVar[int] = 1

    def check_precision(self, subnet: "Subnet", element: "ProcessingElement") -> None:
        """BackendError unless this backend runs `element`'s precision."""
        if element.precision not in self.precisions:
            raise BackendError(f"{self.name} cannot run {subnet.name} on {element.name}: it runs "
                               f"{', '.join(self.precisions)}, not {element.precision}")

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """(usable here?, why not)."""
        return True, ""

    @abstractmethod
    def prepare(self, subnet: "Subnet", element: "ProcessingElement", **opts: Any) -> Runner:
        """Build what is needed to run `subnet` on `element` (sessions, weights on device)."""

    def prepare_lanes(self, subnet: "Subnet", element: "ProcessingElement", lanes: int,
                      like: Runner | None = None, **opts: Any) -> list[Runner]:
        """`lanes` runners of `subnet` on `element` that may run at the same time, one frame
        each (GPU lanes). A backend whose runners can share weights overrides this, sharing
        those of `like` (a runner of the same sub-network on the element) where given."""
        return [self.prepare(subnet, element, **opts) for _ in range(lanes)]

    def share_key(self, element: "ProcessingElement") -> tuple | None:
        """Elements with equal keys can run one sub-network on one shared state (`prepare_like`);
        None: `element` shares nothing."""
        return None

    def prepare_like(self, runner: Runner, element: "ProcessingElement") -> Runner | None:
        """A runner of `runner`'s sub-network on `element` sharing `runner`'s state (built for an
        element of the same `share_key`), or None where that state is gone."""
        return None
