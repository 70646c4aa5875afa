"""The ILP keeps the solutions it found when the time limit stops it on another configuration,
says which configurations went unsolved, and is not an input error when none was solved."""
from dataclasses import replace
import pytest

from hetflow.errors import InfeasibleError, InputError
from hetflow.mapping.strategies import ilp

pytest.importorskip("scipy")


def test_solutions_found_are_kept_when_time_runs_out_on_another_configuration(factory, monkeypatch):
    p = factory.problem(6, factory.elements(3), seed=1)
    p = replace(p, configurations=[["cpu0", "cpu1"], ["cpu0", "cpu1", "cpu2"]])
    real = ilp.solve_config
    shares = []

    def second_times_out(problem, config, *a, **k):
        shares.append(a[2])  # the share of time_limit this configuration got
        return "time limit" if len(config) == 3 else real(problem, config, *a, **k)

    monkeypatch.setattr(ilp, "solve_config", second_times_out)
    r = ilp.search(p, time_limit=30.0, solver="highs")
    assert set(r.best.elements) <= {"cpu0", "cpu1"}
    assert list(r.notes["unsolved"]) == ["cpu0+cpu1+cpu2"]
    assert shares[0] == pytest.approx(15.0, rel=0.05)  # half of 30 s for the first of two


def test_no_solution_in_time_is_infeasible_not_bad_input(factory, monkeypatch):
    p = factory.problem(6, factory.elements(2), seed=1)
    monkeypatch.setattr(ilp, "solve_config", lambda *a, **k: "time limit")
    with pytest.raises(InfeasibleError, match="no solution within time_limit") as e:
        ilp.search(p, time_limit=1.0, solver="highs")
    assert not isinstance(e.value, InputError)
