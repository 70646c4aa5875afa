from hypothesis import given, strategies as st

from hetflow.plan.mapping import Mapping, group_name


@given(st.integers(2, 6), st.integers(1, 5))
def test_mappings_that_run_alike_have_one_key(members, layers):
    group = group_name([f"cpu{i}" for i in range(members)])
    assignment = {f"l{i}": group for i in range(layers)}
    default = Mapping(dict(assignment))
    spelled = Mapping(dict(assignment), dispatch={group: list(range(members))})
    assert default.key() == spelled.key()
    weighted = Mapping(dict(assignment), dispatch={group: [0] * 3 + list(range(members))})
    assert weighted.key() != default.key()
    static = Mapping(dict(assignment), dispatch_mode="static")
    assert static.key() != default.key()
    # a pattern for an actor the mapping does not use changes nothing
    stray = Mapping(dict(assignment), dispatch={"gpu0|gpu1": [0, 0, 1]})
    assert stray.key() == default.key()


def test_one_notation_for_designs():
    from hetflow.plan.mapping import describe_design

    assert describe_design(["gpu0", "cpu0|cpu1", "cpu2-5"], {"gpu0": 8}) == \
        "gpu0 x8 + cpu0|cpu1 + cpu2-5"
    assert describe_design(["cpu0-1|gpu0"], {"gpu0": 1}) == "cpu0-1|gpu0"
