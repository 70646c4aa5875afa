"""Kang et al.'s task-clustering ILP: optimal within its formulation (against brute force of
the same objective and constraints), both solvers, Eq. 5-6 not binding, determinism."""
from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from hetflow.errors import InfeasibleError
from hetflow.mapping.strategies import ilp
from hetflow.mapping.strategies.base import configurations

TINY = [(3, 1, 1, 0, 1), (4, 2, 1, 0, 2), (5, 1, 0, 1, 3), (5, 2, 0, 0, 4), (4, 1, 1, 1, 5),
        (6, 2, 0, 0, 6)]


def brute_force(problem, use_all: bool) -> float | None:
    """Smallest largest-cluster time (Eq. 7-8) over every assignment meeting Eq. 1-4."""
    layers = [l.name for l in problem.graph.layers]
    best = None
    for config in configurations(problem):
        for combo in itertools.product(config, repeat=len(layers)):
            a = dict(zip(layers, combo))
            if ilp.clustering_ok(problem, a, use_all, config):
                v = max(ilp.cluster_times(problem, config, a).values())
                best = v if best is None else min(best, v)
    return best


@pytest.mark.parametrize("solver", ["cpsat", "highs"])
@pytest.mark.parametrize("n_layers,n_cpu,n_gpu,big,seed", TINY)
def test_optimal_within_formulation(factory, solver, n_layers, n_cpu, n_gpu, big, seed):
    p = factory.problem(n_layers, factory.elements(n_cpu, n_gpu, big), seed=seed)
    for use_all in (False, True):
        want = brute_force(p, use_all)
        if want is None:
            with pytest.raises(InfeasibleError):
                ilp.search(p, use_all=use_all, solver=solver)
            continue
        res = ilp.search(p, use_all=use_all, solver=solver)
        assert res.notes["status"] == "optimal" and res.notes["solver"] == solver
        assert "optimal within Kang" in res.notes["optimal"]
        # CP-SAT works in whole nanoseconds: a rounding error per term at most
        assert res.notes["objective_us"] == pytest.approx(want, abs=1e-3 * (n_layers + 3))
        assert ilp.clustering_ok(p, res.best.assignment, use_all)


def test_schedule_constraints_do_not_bind(factory):
    p = factory.problem(6, factory.elements(2, 1), seed=8)
    plain = ilp.search(p, solver="highs")
    sched = ilp.search(p, solver="highs", schedule=True)
    assert sched.notes["objective_us"] == pytest.approx(plain.notes["objective_us"], rel=1e-9)


def test_symmetric_elements_and_determinism(factory):
    p = factory.problem(10, factory.elements(4, 1), seed=9)
    a, b = ilp.search(p, seed=3), ilp.search(p, seed=3)
    assert a.best.key() == b.best.key()
    assert a.notes["objective_us"] == pytest.approx(highs_objective(p), rel=1e-6)
    assert a.metrics.throughput > 0


def highs_objective(p) -> float:
    return ilp.search(p, solver="highs").notes["objective_us"]


def test_every_element_used_is_infeasible_with_too_few_layers(factory):
    p = factory.problem(2, factory.elements(3, 1), seed=0)
    with pytest.raises(InfeasibleError, match="uses every element"):
        ilp.search(p, use_all=True)


@pytest.mark.parametrize("solver", ["cpsat", "highs"])
def test_ctrl_c_still_reaches_python_after_a_solve(solver):
    """A solver may install its own SIGINT handler and leave the default action behind (CP-SAT
    does unless told not to): the next Ctrl-C, during a run, would then kill the process with
    nothing reported. In a child process, so that such a kill fails this test only."""
    code = f"""
import os, signal, sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
from conftest import make_elements, make_problem
from hetflow.mapping.strategies import ilp
ilp.search(make_problem(5, make_elements(2, 1, 0), seed=1), solver={solver!r})
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
except KeyboardInterrupt:
    print("KeyboardInterrupt")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "KeyboardInterrupt", \
        f"exit {done.returncode}: {done.stdout[-500:]}{done.stderr[-500:]}"
