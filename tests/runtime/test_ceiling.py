import os

import pytest

from hetflow.runtime.ceiling import ceiling, firing_seconds


@pytest.mark.parametrize("kind", [dict(stages=3), dict(copies=2)])
def test_the_ceiling_runs_the_engine_with_instant_stages_and_checks_the_outputs(kind):
    """A chain of stages, or the whole model on two members: each run's outputs are checked
    against the reference inside `ceiling` (it raises otherwise), and the rate is the engine's
    alone: far above any real model's."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 cores")
    r = ceiling(frames=600, repeats=1, **{"stages": 3, **kind})
    assert r["fps"] > 1000 and len(r["runs"]) == 1
    assert r["us_per_frame"] == pytest.approx(1e6 / r["fps"])
    assert (r["copies"], r["stages"]) == ((2, 1) if "copies" in kind else (0, 3))


def test_a_firing_costs_the_engine_microseconds_on_the_core_asked_for(monkeypatch):
    """firing_seconds: one member on the core given, its runs' median time per frame."""
    import hetflow.runtime.ceiling as ceiling_mod

    core = sorted(os.sched_getaffinity(0))[-1]
    seen = {}
    real = ceiling_mod.ceiling

    def spy(**kw):
        seen.update(kw)
        return real(**kw)

    monkeypatch.setattr(ceiling_mod, "ceiling", spy)
    s = firing_seconds(core, frames=600, repeats=3)
    assert seen["copies"] == 1 and seen["cores"] == [core] and seen["repeats"] == 3
    assert 1e-7 < s < 1e-3
