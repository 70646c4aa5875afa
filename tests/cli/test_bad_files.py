"""Every bad plan, profile or multi-plan file gets one line naming the file, the field path and
what was expected, exit code 2, and no output file: the schemas (hetflow.schema) at work through
the real commands."""
import json

import pytest

from hetflow.profile.profile import Profile


def corrupt(path, edit):
    d = json.loads(path.read_text())
    edit(d)
    path.write_text(json.dumps(d))
    return path


def first_layer(d):
    return next(iter(d["mapping"]["assignment"]))


PLAN_CASES = [
    (lambda d: d.pop("capacity_frames"), "capacity_frames: missing"),
    (lambda d: d["mapping"].pop("assignment"), "mapping.assignment: missing"),
    (lambda d: d.update(version=3), "version: expected 1 or 2, got 3"),
    (lambda d: d.update(version=True), "version: expected a valid integer, got True"),
    (lambda d: d.update(capacity_frames="2"), "capacity_frames: expected a valid integer, got '2'"),
    (lambda d: d["mapping"]["assignment"].update({first_layer(d): 3}),
     "mapping.assignment.{layer}: expected a valid string, got 3"),
    (lambda d: d["app"]["channels"][0].update(tokens=[1]),
     "app.channels[0].tokens: expected a valid integer, got [1]"),
    (lambda d: d["elements"]["cpu0"].update(kind="tpu"),
     "elements.cpu0.kind: expected 'cpu', 'gpu' or 'accel', got 'tpu'"),
    (lambda d: d["mapping"].update(assignmnet={}), "mapping.assignmnet: unknown key"),
    (lambda d: d["mapping"].update(lanes={"cpu0": 0}),
     "mapping.lanes.cpu0: expected greater than or equal to 1, got 0"),
    (lambda d: d.update(elements=[]), "elements: expected a JSON object, got []"),
    (lambda d: d["mapping"].update(batch={"cpu0": "8"}),
     "mapping.batch.cpu0: expected a valid integer, got '8'"),
]


@pytest.mark.parametrize("edit, says", PLAN_CASES)
def test_a_bad_plan_file(hetflow, plan_file, tmp_path, edit, says):
    layer = first_layer(json.loads(plan_file.read_text()))
    corrupt(plan_file, edit)
    trace = tmp_path / "trace.json"
    code, out, err = hetflow("run", plan_file, "--frames", "4", "--warmup", "0",
                             "--trace", trace)
    assert code == 2 and out == ""
    assert err == (f"hetflow: error: {plan_file}: not a valid hetflow plan: "
                   f"{says.format(layer=layer)}\n")
    assert not trace.exists()


def test_a_plan_that_is_not_an_object(hetflow, tmp_path):
    f = tmp_path / "list.json"
    f.write_text("[1, 2]")
    code, out, err = hetflow("run", f)
    assert code == 2
    assert err == (f"hetflow: error: {f}: not a valid hetflow plan: (top level): expected a JSON "
                   "object, got [1, 2]\n")


def test_several_problems_are_counted_on_the_one_line(hetflow, plan_file):
    corrupt(plan_file, lambda d: [d.pop("model_name"), d.pop("strategy")])
    code, _, err = hetflow("run", plan_file)
    assert code == 2 and err.count("\n") == 1
    assert err.endswith("model_name: missing (and 1 more problem(s))\n")


def valid_profile(model_hash="h"):
    return Profile("tiny", model_hash, "test", "ph", elements={"cpu0": {"kind": "cpu"}},
                   layer_times={"cpu0": {"conv": {"median": 1e-3, "p90": 2e-3, "n": 5}}},
                   comm={"cpu->cpu": {"a": 1e-5, "b": 1e-9}})


def test_a_valid_profile_file_round_trips(tmp_path):
    prof = valid_profile()
    assert Profile.load(prof.save(tmp_path / "p.json")) == prof


@pytest.mark.parametrize("edit, says", [
    (lambda d: d.pop("platform_hash"), "platform_hash: missing"),
    (lambda d: d.update(version=0), "version: expected 1, got 0"),
    (lambda d: d["layer_times"]["cpu0"]["conv"].pop("median"),
     "layer_times.cpu0.conv.median: missing"),
    (lambda d: d["layer_times"]["cpu0"]["conv"].update(median="fast"),
     "layer_times.cpu0.conv.median: expected a valid number, got 'fast'"),
    (lambda d: d["comm"]["cpu->cpu"].pop("b"), "comm.cpu->cpu.b: missing"),
    (lambda d: d.update(layer_time={}), "layer_time: unknown key"),
])
def test_a_bad_profile_file(hetflow, plan_file, tmp_path, edit, says):
    prof = tmp_path / "prof.json"
    valid_profile().save(prof)
    corrupt(prof, edit)
    out_plan = tmp_path / "out.json"
    code, out, err = hetflow("map", plan_file.parent / "tiny.onnx", "--profile", prof,
                             "-o", out_plan)
    assert code == 2
    assert err == f"hetflow: error: {prof}: not a valid hetflow profile: {says}\n"
    assert not out_plan.exists()


def multiplan(plan_file):
    return {"version": 1, "kind": "hetflow-multiplan", "platform_name": "test",
            "apps": [{"name": "a", "period_s": 0.5, "priority": 1,
                      "plan": json.loads(plan_file.read_text())}]}


@pytest.mark.parametrize("edit, says", [
    (lambda d: d.pop("apps"), "apps: missing"),
    (lambda d: d.update(version="1"), "version: expected a valid integer, got '1'"),
    (lambda d: d["apps"][0].update(period_s=-1), "apps[0].period_s: expected greater than or equal to 0"),
    (lambda d: d["apps"][0]["plan"]["mapping"].update(policy="greedy"),
     "apps[0].plan.mapping.policy: expected 'paper' or 'maximal', got 'greedy'"),
    (lambda d: d["apps"][0].update(deadline=1), "apps[0].deadline: unknown key"),
])
def test_a_bad_multiplan_file(hetflow, plan_file, tmp_path, edit, says):
    f = tmp_path / "multi.json"
    f.write_text(json.dumps(multiplan(plan_file)))
    corrupt(f, edit)
    report = tmp_path / "report.json"
    code, out, err = hetflow("run-multi", f, "--frames", "2", "-o", report)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"hetflow: error: {f}: not a valid hetflow multi-plan: {says}")
    assert not report.exists()


def test_files_hetflow_wrote_on_the_benchmark_machines_still_load():
    """The schemas describe the files hetflow has written: plans (CPU pipelines, two GPUs, GPU
    lanes, layer splits, interleaved orders), a GPU profile and multi-plans kept from the runs
    of docs/benchmarks.md load."""
    from pathlib import Path

    from hetflow.plan.plan import Plan
    from hetflow.multi.multiplan import MultiPlan

    seen = {"plan": 0, "profile": 0, "multi": 0}
    for f in sorted((Path(__file__).parent / "data" / "written").glob("*.json")):
        if f.name.endswith(".plan.json"):
            Plan.load(f)
            seen["plan"] += 1
        elif f.name.endswith(".profile.json"):
            Profile.load(f)
            seen["profile"] += 1
        elif f.name.endswith((".multi.json", ".naive.json")):
            MultiPlan.load(f)
            seen["multi"] += 1
    assert seen == {"plan": 5, "profile": 1, "multi": 2}, seen
