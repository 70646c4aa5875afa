import csv
import json

import numpy as np
import pytest

from hetflow.errors import InfeasibleError, InputError
from hetflow.plan.mapping import Mapping
from hetflow.multi.front import write_front
from hetflow.multi.multiplan import MultiPlan, make_multiplan
from hetflow.multi.problem import MultiProblem, check_periods, fastest_frame, schedule_of
from hetflow.multi.search import (JointEncoding, choose, evaluate_joint, initial_population,
                                  naive_mappings, search_multi)

from multi_helpers import app_problem, elements


def tight_three():
    """The GPU is 4x faster than a core, so the naive mapping puts all three apps on it; then
    the 3 ms app waits for a 2 ms firing of another app and misses. Moving the two slow apps
    to the two cores meets every period."""
    els = elements()
    return MultiProblem([app_problem(6, 1, 0.003, 1, els, "fast"),
                         app_problem(8, 2, 0.012, 2, els, "mid"),
                         app_problem(8, 3, 0.014, 3, els, "slow")])


def dominates(a, b):
    return np.all(a <= b) and np.any(a < b)


def test_naive_misses_and_the_search_meets_every_deadline():
    mp = tight_three()
    res = search_multi(mp, pop_size=16, generations=8, seed=1)
    assert not res.naive.feasible
    assert not res.naive.analysis["fast"].schedulable
    assert res.chosen.feasible and res.chosen in res.front
    for c in res.front:
        assert c.feasible
        assert all(a.response_worst <= a.period for a in c.analysis.values())
        assert not any(dominates(o.objectives, c.objectives) for o in res.front)
    assert len(res.objectives) == 4  # three response times and energy
    # the chosen plan keeps 'fast' alone on the GPU: nothing else may block it long
    gpu_users = [a.name for a, m in zip(mp.apps, res.chosen.mappings) if "gpu0" in m.elements]
    assert gpu_users[0] == "fast"


def test_spea2_finds_a_plan_too(two_apps):
    res = search_multi(two_apps, "spea2", pop_size=8, generations=3)
    assert res.chosen.feasible and res.notes["algorithm"] == "spea2"


def test_objectives_are_penalised_response_times_and_energy(two_apps):
    enc = JointEncoding(two_apps, ["cpu0", "cpu1", "gpu0"])
    x = initial_population(enc, 4, np.random.default_rng(0))[0]
    c = evaluate_joint(two_apps, enc.decode(x), enc.config)
    assert c.objectives[0] == pytest.approx(c.analysis["app1"].response_worst)
    assert c.objectives[-1] == pytest.approx(c.energy)
    assert c.energy > 0


def test_an_impossible_period_names_the_application_and_element():
    els = elements()
    mp = MultiProblem([app_problem(6, 1, 0.050, 1, els, "easy"),
                       app_problem(8, 2, 0.0005, 2, els, "hard")])
    low, element = fastest_frame(mp.app("hard"))
    assert low > 0.0005 and element == "gpu0"
    with pytest.raises(InfeasibleError, match=r"application hard: .*0\.5 ms.*bottleneck element gpu0"):
        check_periods(mp)
    with pytest.raises(InfeasibleError, match="application hard"):
        search_multi(mp, pop_size=4, generations=1)


def test_periods_no_joint_mapping_meets_name_the_app_and_bottleneck():
    els = elements(n_cpu=1, gpu=False, power=False)
    # each app alone fits its 7 ms period on the one core (about 6 ms), both together cannot
    mp = MultiProblem([app_problem(6, 1, 0.007, 1, els, "a"),
                       app_problem(6, 4, 0.007, 2, els, "b")])
    with pytest.raises(InfeasibleError, match=r"application [ab] misses .*bottleneck element cpu0"):
        search_multi(mp, pop_size=6, generations=2)


def test_one_model_twice_is_two_streams_with_their_own_mappings():
    els = elements()
    a = app_problem(6, 1, 0.05, 1, els, "a")
    b = app_problem(6, 1, 0.05, 2, els, "b")  # same seed: the same model (same hash)
    mp = MultiProblem([a, b])
    res = search_multi(mp, pop_size=6, generations=2)
    assert res.chosen.feasible and set(res.chosen.analysis) == {"a", "b"}
    with pytest.raises(InputError, match="two applications are named 'a'"):
        MultiProblem([a, app_problem(6, 1, 0.05, 2, els, "a")])


def test_multiplan_round_trip_and_front_files(tmp_path):
    mp = tight_three()
    res = search_multi(mp, pop_size=12, generations=4, seed=2)
    plan = make_multiplan(mp, res)
    path = plan.save(tmp_path / "multi.json")
    back = MultiPlan.load(path)
    assert [a.name for a in back.apps] == ["fast", "mid", "slow"]
    assert [a.priority for a in back.apps] == [1, 2, 3]
    for a, m in zip(back.apps, res.chosen.mappings):
        assert a.plan.mapping.assignment == m.assignment
        assert a.predicted["response_worst"] == pytest.approx(
            res.chosen.analysis[a.name].response_worst)
        assert a.plan.predicted["throughput"] == pytest.approx(1 / a.period)
    d = json.loads(path.read_text())
    assert d["priorities"] == {"fast": 1, "mid": 2, "slow": 3}
    assert d["shared_elements"] == plan.shared_elements
    assert d["predicted"]["naive_schedulable"] is False
    write_front(mp, res, tmp_path / "front.csv")
    rows = list(csv.DictReader(open(tmp_path / "front.csv")))
    assert len(rows) == len(res.front) and sum(r["chosen"] == "True" for r in rows) == 1
    assert float(rows[0]["fast_worst_ms"]) <= 3.0
    assert (tmp_path / "front.png").stat().st_size > 0


def test_multiplan_validation(tmp_path, two_apps):
    res = search_multi(two_apps, pop_size=6, generations=1)
    d = make_multiplan(two_apps, res).to_dict()
    d["apps"][1]["priority"] = 1
    with pytest.raises(InputError, match="priority clash"):
        MultiPlan.from_dict(d, "m.json")
    d["apps"][1]["priority"] = 2
    d["apps"][0]["period_s"] = -0.5  # 0 is allowed: free-running
    with pytest.raises(InputError, match=r"m.json: not a valid hetflow multi-plan: apps\[0\]"
                                         r".period_s: expected greater than or equal to 0, "
                                         r"got -0.5$"):
        MultiPlan.from_dict(d, "m.json")
    with pytest.raises(InputError, match="plan.json: not a valid hetflow multi-plan: kind: missing"):
        MultiPlan.from_dict({"version": 1}, "plan.json")
    with pytest.raises(InputError, match="a single-application plan, not a multi-plan"):
        MultiPlan.from_dict(d["apps"][0]["plan"], "plan.json")
    with pytest.raises(InputError, match="no such multi-plan"):
        MultiPlan.load(tmp_path / "missing.json")


def test_replica_groups_are_refused_in_a_schedule(two_apps):
    a = two_apps.apps[0]
    m = Mapping({l.name: "cpu0|cpu1" for l in a.graph.layers})
    with pytest.raises(InputError, match="replica group"):
        schedule_of(a, m)


def test_naive_is_each_app_on_its_fastest_element(two_apps):
    for m in naive_mappings(two_apps):
        assert m.elements == ["gpu0"]


def test_naive_never_puts_applications_on_elements_that_share_cores():
    """Two cores as one element (cpu0-1) or as two (cpu0, cpu1): an application faster on the
    pair and one faster on a single core are both put in the first's configuration."""
    from dataclasses import replace as dc_replace

    from hetflow.platform.spec import ProcessingElement

    els = [ProcessingElement("cpu0-1", "cpu", (0, 1), cluster="cpu", power_w=4.0),
           ProcessingElement("cpu0", "cpu", (0,), cluster="cpu", power_w=2.0),
           ProcessingElement("cpu1", "cpu", (1,), cluster="cpu", power_w=2.0)]
    first, second = app_problem(6, 1, 0.05, 1, els), app_problem(6, 2, 0.08, 2, els)
    # first: the pair is fastest; second: a single core is (the pair scales badly for it)
    first.problem.layer_times[:, 0] /= 2
    second.problem.layer_times[:, 0] *= 3
    configs = [["cpu0-1"], ["cpu0", "cpu1"]]
    for a in (first, second):
        a.problem = dc_replace(a.problem, configurations=configs)
    mp = MultiProblem([first, second])
    used = {e for m in naive_mappings(mp) for e in m.elements}
    assert any(used <= set(c) for c in configs), used
    assert used == {"cpu0-1"}  # the first application's fastest element's configuration


def test_margin_ties_are_broken_by_the_next_largest_ratio():
    from types import SimpleNamespace as NS

    def cand(*ratios, energy=None):
        return NS(energy=energy, margin=max(ratios),
                  analysis={f"a{i}": NS(response_worst=r, relative_deadline=1.0) for i, r in enumerate(ratios)})

    worse, better = cand(0.6, 0.5, 0.4), cand(0.6, 0.3, 0.4)
    assert choose([worse, better]) is better
    assert choose([cand(0.7, 0.1, 0.1), better]) is better  # the largest ratio decides first
    costly, cheap = cand(0.6, 0.3, 0.4, energy=2.0), cand(0.9, 0.1, 0.1, energy=1.0)
    assert choose([costly, cheap]) is costly
    assert choose([costly, cheap], "energy") is cheap


SAME_ANSWER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from test_search import tight_three
from hetflow.multi.search import search_multi
out = []
for workers in (1, 2):
    r = search_multi(tight_three(), pop_size=16, generations=4, seed=int(sys.argv[2]),
                     configs=[["cpu0", "cpu1", "gpu0"], ["cpu0", "gpu0"], ["cpu1", "gpu0"]],
                     workers=workers)
    out.append({"processes": r.notes["processes"], "evaluations": r.evaluations,
                "front": [c.objectives.tolist() for c in r.front],
                "chosen": [m.to_dict() for m in r.chosen.mappings]})
print(json.dumps(out))
"""


@pytest.mark.parametrize("seed", [1, 2])
def test_the_search_s_answer_does_not_depend_on_its_processes(seed):
    """Each configuration's search draws from its own seed, so forked workers find what one
    process finds: the same front, the same chosen plan, the same count of mappings. (In a
    fresh interpreter: the search forks only from a process of one thread, and this one may
    have others.)"""
    import subprocess
    import sys
    from pathlib import Path

    r = subprocess.run([sys.executable, "-c", SAME_ANSWER, str(Path(__file__).parent),
                        str(seed)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    alone, forked = json.loads(r.stdout)
    assert (alone["processes"], forked["processes"]) == (1, 2)
    assert forked.pop("processes") != alone.pop("processes") and forked == alone
