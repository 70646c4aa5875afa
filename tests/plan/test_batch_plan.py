"""Batches in the plan data: Mapping.batch / batch_wait, the design notation, and plan files of
the version before batches, which load with every element at batch 1."""
import json
from pathlib import Path

import pytest

from hetflow.errors import InputError
from hetflow.plan.mapping import Mapping, describe_design
from hetflow.plan.plan import PLAN_VERSION, Plan, check_plan_batch

WRITTEN = Path(__file__).parents[1] / "cli" / "data" / "written"
PLANS = sorted(WRITTEN.glob("*.plan.json"))


def test_the_notation_writes_lanes_then_batch_and_leaves_out_ones():
    assert describe_design(["gpu0"], {"gpu0": 8}, {"gpu0": 16}) == "gpu0 x8 b16"
    assert describe_design(["gpu0"], {}, {"gpu0": 4}) == "gpu0 b4"
    assert describe_design(["cpu0-3", "gpu0|cpu4"], {"gpu0": 2}, {"gpu0": 1}) == \
        "cpu0-3 + gpu0 x2|cpu4"
    m = Mapping({"l1": "gpu0|cpu1"}, lanes={"gpu0": 8}, batch={"gpu0": 32})
    assert describe_design(m.actors, m.lanes, m.batch) == "gpu0 x8 b32|cpu1"


def test_batch_of_is_one_where_absent_and_batches_round_trip():
    m = Mapping({"l1": "gpu0", "l2": "cpu0"}, batch={"gpu0": 8}, batch_wait={"gpu0": 0.002})
    assert (m.batch_of("gpu0"), m.batch_of("cpu0")) == (8, 1)
    back = Mapping.from_dict(json.loads(json.dumps(m.to_dict())))
    assert back == m and back.key() == m.key()
    assert "batch" not in Mapping({"l1": "gpu0"}).to_dict()  # b = 1 everywhere: not written
    # the batch changes how a design runs: its key differs; batch 1 spelled out does not
    assert Mapping({"l1": "gpu0"}).key() != Mapping({"l1": "gpu0"}, batch={"gpu0": 2}).key()
    assert Mapping({"l1": "gpu0"}).key() == Mapping({"l1": "gpu0"}, batch={"gpu0": 1}).key()


@pytest.mark.parametrize("path", PLANS, ids=[p.name for p in PLANS])
def test_plans_written_before_batches_load_at_batch_one(path):
    d = json.loads(path.read_text())
    assert d["version"] < PLAN_VERSION  # written by the version before batches
    plan = Plan.from_dict(d, str(path))
    assert plan.mapping.batch == {} and all(plan.mapping.batch_of(e) == 1
                                            for e in plan.mapping.elements)
    again = Plan.from_dict(json.loads(json.dumps(plan.to_dict())), "again")
    assert again.to_dict()["version"] == PLAN_VERSION and again.mapping == plan.mapping


def test_a_batched_plan_round_trips_and_an_unknown_version_is_refused():
    d = next(d for d in (json.loads(p.read_text()) for p in PLANS)
             if not d["mapping"].get("interleave"))
    element = next(iter(d["elements"]))
    d["mapping"]["batch"], d["mapping"]["batch_wait"] = {element: 4}, {element: 0.003}
    plan = Plan.from_dict(d, "batched")
    assert plan.mapping.batch == {element: 4} and plan.mapping.batch_wait == {element: 0.003}
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict())), "again").mapping == plan.mapping
    d["version"] = PLAN_VERSION + 1
    with pytest.raises(InputError, match="version"):
        Plan.from_dict(d, "future")


@pytest.mark.parametrize("batch, wait, says", [
    ({"gpu0": 0}, {}, "element 'gpu0': batch must be a whole number >= 1 (got 0)"),
    ({"gpu0": -2}, {}, "element 'gpu0': batch must be a whole number >= 1 (got -2)"),
    ({"gpu0": 4}, {"gpu0": -1.0}, "element 'gpu0': batch_wait must be seconds >= 0"),
    ({"gpu0": 4}, {"gpu0": float("nan")}, "element 'gpu0': batch_wait must be seconds >= 0"),
    ({"gpu9": 4}, {}, "batch is given for element 'gpu9', which the mapping does not use"),
])
def test_bad_batches_are_refused_naming_the_element(batch, wait, says):
    with pytest.raises(InputError, match=says.replace("(", r"\(").replace(")", r"\)")):
        check_plan_batch(Mapping({"l1": "gpu0"}, batch=batch, batch_wait=wait))


def test_a_batch_on_an_interleaved_actor_is_refused():
    m = Mapping({"l1": "gpu0", "l2": "cpu0"}, batch={"gpu0": 4}, interleave={"gpu0": [1, 0]})
    with pytest.raises(InputError, match="element 'gpu0': batch 4 on an interleaved actor"):
        check_plan_batch(m)
