"""The written front holds no dominated design, and every design is matched or beaten by one
on it (an oracle: the quadratic definition, checked pair by pair), over throughput and latency
and with energy per frame too; `--prefer energy` takes the least energy above its floor."""
from types import SimpleNamespace

import pytest
from hypothesis import given, strategies as st

from hetflow.errors import InfeasibleError
from hetflow.mapping.pareto import least_energy, non_dominated

coord = st.floats(0.1, 100, allow_nan=False).map(lambda x: round(x, 1))


def dominates(a, b):
    return a[0] >= b[0] and a[1] <= b[1] and a != b


@given(st.lists(st.tuples(coord, coord), min_size=1, max_size=40))
def test_front_is_exactly_the_non_dominated_points(points):
    front = [points[i] for i in non_dominated(points)]
    assert len(front) == len(set(front))
    for f in front:
        assert not any(dominates(p, f) for p in points)
    for p in points:
        assert any(f == p or dominates(f, p) for f in front)


def test_the_reported_example_drops_the_dominated_design():
    assert non_dominated([(9.0, 111.0), (4.2, 238.0), (3.0, 50.0)]) == [0, 2]


def dominates_n(a, b):
    return (a[0] >= b[0] and all(x <= y for x, y in zip(a[1:], b[1:])) and a != b)


@given(st.lists(st.tuples(coord, coord, coord), min_size=1, max_size=30))
def test_a_front_over_throughput_latency_and_energy_is_exactly_the_non_dominated(points):
    front = [points[i] for i in non_dominated(points)]
    assert len(front) == len(set(front))
    for f in front:
        assert not any(dominates_n(p, f) for p in points)
    for p in points:
        assert any(f == p or dominates_n(f, p) for f in front)


def test_a_frugal_design_stays_on_the_front_though_slower_and_later():
    # (frames/s, ms, J/frame): the third is dominated on the first two, not on energy
    assert non_dominated([(9.0, 111.0, 2.0), (4.2, 238.0, 3.0), (3.0, 300.0, 0.5)]) == [0, 2]


def designs(points):
    """(name, metrics) pairs as a search front holds them: (throughput, J/frame) each."""
    return [(name, SimpleNamespace(throughput=t, energy_per_frame=e, latency=0.01))
            for name, (t, e) in points.items()]


def test_least_energy_takes_the_least_energy_above_the_floor():
    front = designs({"gpu": (900.0, 0.30), "gpu+cpu": (1100.0, 0.42), "cpu": (80.0, 0.9),
                     "gpu x1": (400.0, 0.22)})
    assert least_energy(front, 500.0)[0] == "gpu"
    assert least_energy(front, 1000.0)[0] == "gpu+cpu"
    assert least_energy(front, None)[0] == "gpu x1"


@given(st.lists(st.tuples(st.floats(1, 1e4), st.floats(1e-3, 10)), min_size=1, max_size=20),
       st.floats(0, 1e4))
def test_least_energy_is_the_minimum_over_the_designs_fast_enough(points, floor):
    front = designs({i: p for i, p in enumerate(points)})
    fast = [p for p in points if p[0] >= floor]
    if not fast:
        with pytest.raises(InfeasibleError, match=r"^--min-rate .*: no design on the front is "
                                                  r"predicted that fast \(the fastest: "):
            least_energy(front, floor)
        return
    name, m = least_energy(front, floor)
    assert m.throughput >= floor and m.energy_per_frame == min(e for _, e in fast)
