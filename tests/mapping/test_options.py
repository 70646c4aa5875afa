"""Strategy options are checked by name before a search runs: a typo is an error, not a no-op."""
import pytest

from hetflow.errors import InputError
from hetflow.mapping.planner import search_plan
from hetflow.mapping.strategies.base import REGISTRY, check_options, strategy_options


def test_every_strategy_declares_its_options():
    for name in REGISTRY:
        assert "problem" not in strategy_options(name) and "seed" not in strategy_options(name)
    assert {"fitness", "pop_size"} <= strategy_options("ga")
    assert {"generations", "objectives"} <= strategy_options("nsga2")  # read from _search
    assert strategy_options("spea2") == strategy_options("nsga2")
    # gp passes what it does not take itself on to its base strategy
    assert {"layer", "max_stages"} <= strategy_options("gp")
    assert "fitness" in strategy_options("gp", {"base": "ga"})


def test_a_misspelt_option_names_the_strategy_and_its_options():
    with pytest.raises(InputError, match=r"strategy 'ga' has no option 'fitnes' \(its options: .*"
                                         r"fitness"):
        check_options("ga", {"fitnes": "throughput"})
    with pytest.raises(InputError, match="strategy 'ilp' has no option 'latency_cap'"):
        check_options("ilp", {"latency_cap": 0.01})
    check_options("pipeline", {"latency_cap": 0.01, "max_stages": 2})


def test_search_plan_refuses_before_searching(factory):
    p = factory.problem(5, factory.elements(2))
    with pytest.raises(InputError, match="has no option 'max_stage'"):
        search_plan(p, "pipeline", "p", max_stage=2)
    plan, _ = search_plan(p, "pipeline", "p", max_stages=2)
    assert plan.strategy == "pipeline"
