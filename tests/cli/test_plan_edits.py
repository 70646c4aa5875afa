"""A hand-edited plan is refused with one line naming what is wrong, never run as the app it
no longer describes (the runtime executes `app`, not `mapping`)."""
import json

import pytest

from hetflow.errors import InputError
from hetflow.plan.plan import Plan


def edited(path, edit):
    d = json.loads(path.read_text())
    edit(d)
    path.write_text(json.dumps(d))
    return path


def move_first_layer(d):
    layer = next(iter(d["mapping"]["assignment"]))
    d["mapping"]["assignment"][layer] = "cpu1"


def rename_element(d):  # the app and mapping name gpu7, which elements does not describe
    d["elements"]["gpu7"] = d["elements"].pop("cpu1")


def dispatch_mode(d):
    d["mapping"]["dispatch_mode"] = "round-robin"


def phase_moved(d):  # the app's own assignment edited, its phases not
    layer = d["app"]["phases"]["cpu0"][0]["layers"][0]
    d["mapping"]["assignment"][layer] = d["app"]["assignment"][layer] = "cpu1"


def actor_phases_dropped(d):  # the channels into cpu1 still name its phases
    del d["app"]["phases"]["cpu1"]


def channel_phase_moved(d):
    d["app"]["channels"][0]["src_phase"] = 5


def layer_dropped(d):  # a layer assigned to cpu0 that no phase runs
    d["app"]["phases"]["cpu0"][0]["layers"].pop()


def outputs_cleared(d):
    d["app"]["model_outputs"].clear()


def channel_source_lost(d):  # the phase no longer makes what its channel carries
    d["app"]["phases"]["cpu0"][0]["outputs"].clear()


def batch_zero(d):
    d["mapping"]["batch"] = {"cpu0": 0}


def batch_negative(d):
    d["mapping"]["batch"] = {"cpu1": -4}


def batch_wait_negative(d):
    d["mapping"]["batch"] = {"cpu0": 2}
    d["mapping"]["batch_wait"] = {"cpu0": -0.001}


def batch_unused_element(d):
    d["mapping"]["batch"] = {"gpu3": 8}


@pytest.mark.parametrize("edit, says", [
    (batch_zero, "element 'cpu0': batch must be a whole number >= 1 (got 0)"),
    (batch_negative, "element 'cpu1': batch must be a whole number >= 1 (got -4)"),
    (batch_wait_negative, "element 'cpu0': batch_wait must be seconds >= 0 (got -0.001)"),
    (batch_unused_element, "batch is given for element 'gpu3', which the mapping does not use"),
    (move_first_layer, "mapping.assignment and app.assignment disagree (layer "),
    (rename_element, "element 'cpu1' (of actor 'cpu1') is not among the plan's elements "
                     "(cpu0, gpu7)"),
    (dispatch_mode, "not a valid hetflow plan: mapping.dispatch_mode: expected 'dynamic' or "
                    "'static', got 'round-robin'"),
    (phase_moved, "app.assignment and app.phases disagree (layer "),
    (layer_dropped, "app.assignment and app.phases disagree (layer 'l2': 'cpu0' vs unmapped"),
    (outputs_cleared, "app.model_inputs and app.model_outputs must name the model's inputs and "
                      "outputs"),
    (channel_source_lost, "app.channels 't2:cpu0->cpu1': tensor 't2' is not among the outputs "
                          "of actor 'cpu0' phase 0 in app.phases"),
    (actor_phases_dropped, "app.assignment and app.phases disagree (layer "),
    (channel_phase_moved, "app.channels 't2:cpu0->cpu1' names phase 5 of actor 'cpu0', which "
                          "app.phases does not have"),
])
def test_an_edited_plan_is_refused_in_one_line(hetflow, plan_file, edit, says):
    edited(plan_file, edit)
    with pytest.raises(InputError, match="^" + str(plan_file)):
        Plan.load(plan_file)
    code, out, err = hetflow("run", plan_file, "--frames", "20")
    assert code == 2 and f"hetflow: error: {plan_file}: {says}" in err
    assert err.count("\n") == 1 and out == ""


def test_disagreeing_assignments_say_to_map_again(plan_file):
    edited(plan_file, move_first_layer)
    with pytest.raises(InputError, match=r"1 layer\(s\) differ.*Run `hetflow map` again"):
        Plan.load(plan_file)


def test_an_unedited_plan_loads(plan_file):
    plan = Plan.load(plan_file)
    assert plan.mapping.assignment == plan.app.assignment
