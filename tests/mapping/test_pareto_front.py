"""The written front holds no dominated design, and every design is matched or beaten by one
on it (an oracle: the quadratic definition, checked pair by pair)."""
from hypothesis import given, strategies as st

from hetflow.mapping.pareto import non_dominated

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
