import os

import pytest

from hetflow.bench.engine_ceiling import ceiling


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
