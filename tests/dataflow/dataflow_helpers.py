"""Small graph builders shared by the dataflow analysis tests."""
from __future__ import annotations

import pytest

from hetflow.dataflow.graphs import Actor, Channel, CsdfGraph


def chain(times: list[float], capacity: int | None = None, transfer: float = 0.0,
          concurrency: int | None = 1) -> CsdfGraph:
    """a0 -> a1 -> ... with one token per firing on every channel."""
    actors = [Actor(f"a{i}", [t], concurrency=concurrency) for i, t in enumerate(times)]
    channels = [Channel(f"c{i}", f"a{i}", f"a{i + 1}", [1], [1], capacity=capacity,
                        transfer_time=transfer) for i in range(len(times) - 1)]
    return CsdfGraph("chain", actors, channels)


@pytest.fixture
def make_chain():
    return chain
