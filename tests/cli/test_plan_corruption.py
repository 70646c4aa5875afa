"""Property: any corruption of a valid plan file -- a required key deleted, a layer, element or
actor dropped from a map the plan's meaning rests on, a value's JSON type changed anywhere in the
typed part -- is refused by `hetflow run` with exit code 2 and one line naming the file, never a
traceback and never a run."""
import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FREE_FORM = {("predicted",), ("search",), ("mapping", "meta")}  # any JSON goes there
REQUIRED = {  # keys a record cannot do without, by the record's path with map keys as "*"
    (): {"version", "model_name", "model_hash", "platform_name", "strategy", "capacity_frames",
         "predicted", "elements", "mapping", "app"},
    ("mapping",): {"assignment"},
    ("app",): {"model_name", "model_hash", "assignment", "phases", "channels", "model_inputs",
               "model_outputs"},
    ("app", "phases", "*", "#"): {"actor", "index", "layers", "inputs", "outputs"},
    ("app", "channels", "#"): {"name", "tensor", "src", "src_phase", "dst", "dst_phase",
                               "tokens", "nbytes"},
    ("elements", "*"): {"name", "kind"},
}
# maps whose entries the plan's consistency checks tie together: dropping one is refused
CHECKED_MAPS = {("mapping", "assignment"), ("app", "assignment"), ("app", "phases"),
                ("elements",)}
REPLACEMENTS = {str: "x", int: 7, list: [], dict: {}, bool: True}


def shape(path):
    """The record path of `path`: list indices as '#', map keys of name-keyed maps as '*'."""
    out = []
    for i, p in enumerate(path):
        if isinstance(p, int):
            out.append("#")
        elif tuple(out) in {("elements",), ("app", "phases")}:
            out.append("*")
        else:
            out.append(p)
    return tuple(out)


def corruptions(d, path=()):
    """Every (op, path) that must be refused, for the valid plan `d`."""
    if path in FREE_FORM:
        return
    if isinstance(d, dict):
        for k, v in d.items():
            if k in REQUIRED.get(shape(path), ()) or path in CHECKED_MAPS:
                yield "delete", (*path, k)
            yield "retype", (*path, k)
            yield from corruptions(v, (*path, k))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield "retype", (*path, i)
            yield from corruptions(v, (*path, i))


def value_at(d, path):
    for p in path:
        d = d[p]
    return d


def apply(d, op, path, pick, valid):
    parent = d
    for p in path[:-1]:
        try:
            parent = parent[p]
        except (KeyError, IndexError, TypeError):
            return False  # an earlier corruption removed it
    if not isinstance(parent, (dict, list)):
        return False  # an earlier corruption made it a scalar (a string indexes, but is no container)
    key = path[-1]
    try:
        old = parent[key]
    except (KeyError, IndexError, TypeError):
        return False
    if op == "delete":
        del parent[key]
    else:
        was = type(value_at(valid, path))  # a type change twice must not land on the original
        choices = [v for t, v in REPLACEMENTS.items() if t not in (type(old), was)
                   and not (t is int and float in (type(old), was))]
        parent[key] = copy.deepcopy(choices[pick % len(choices)])
    return True


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_corrupted_plan_file_is_refused_in_one_line(hetflow, plan_file, data):
    valid = json.loads(plan_file.read_text())
    ops = list(corruptions(valid))
    chosen = data.draw(st.lists(st.tuples(st.sampled_from(ops), st.integers(0, 3)),
                                min_size=1, max_size=3))
    bad = copy.deepcopy(valid)
    applied = [apply(bad, op, path, pick, valid) for (op, path), pick in chosen]
    assert applied[0]
    target = plan_file.with_name("corrupted.json")
    target.write_text(json.dumps(bad))
    code, out, err = hetflow("run", target, "--frames", "4", "--warmup", "0")
    assert code == 2, (chosen, out, err)
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"hetflow: error: {target}: ")


def test_the_corruptions_cover_every_part_of_the_plan(plan_file):
    ops = list(corruptions(json.loads(plan_file.read_text())))
    deleted = {path[:2] for op, path in ops if op == "delete"}
    assert {("version",), ("mapping", "assignment"), ("app", "channels"),
            ("elements", "cpu0")} <= deleted
    assert any(op == "retype" and path[:3] == ("app", "phases", "cpu0") for op, path in ops)
