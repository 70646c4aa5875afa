"""Split layers run: random CNN DAGs with a random convolution split into random parts, the
parts mapped to random elements, stay live and give every frame, in order, equal to the
unsplit model (the reference is the model before the split); a plan with splits survives its
file and `run` rebuilds the split from the original model."""
from hypothesis import HealthCheck, given, settings, strategies as st

from hetflow.model.split import (LayerSplit, apply_splits, channels_for, output_channels,
                                 output_rows, rows_for)
from hetflow.model.synthetic import random_cnn_graph
from hetflow.runtime.api import load_plan_model, run_plan

GRAPHS = {(n, s): random_cnn_graph(n, s) for n in (8, 12) for s in range(3)}
POOLS = [["pe0", "pe1"], ["pe0", "pe1", "pe2"], ["pe0|pe3", "pe1"]]


def _convs(graph):
    return [l.name for l in graph.layers if l.op_type == "Conv" and
            int(l.attrs.get("group", 1) or 1) == 1 and output_channels(graph, l.name) >= 2]


def assert_runs_exact(plan_for, split, data) -> None:
    """The split graph's layers on random elements: every frame, in order, equals the model
    before the split."""
    pool = data.draw(st.sampled_from(POOLS), label="pool")
    assignment = {l.name: data.draw(st.sampled_from(pool)) for l in split.layers}
    plan = plan_for(split, assignment, data.draw(st.integers(1, 3), label="capacity"))
    frames = 11
    report = run_plan(plan, split, frames=frames, warmup=1, check="all")
    assert report.frames == frames and report.checked_frames == frames
    assert report.max_abs_error < 1e-4


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(GRAPHS)), data=st.data())
def test_split_plans_equal_the_unsplit_model_frame_by_frame(plan_for, key, data):
    graph = GRAPHS[key]
    layer = data.draw(st.sampled_from(_convs(graph)), label="layer")
    channels = output_channels(graph, layer)
    k = data.draw(st.integers(2, min(3, channels)), label="parts")
    parts = channels_for(data.draw(st.lists(st.floats(0.1, 1), min_size=k, max_size=k)), channels)
    split = apply_splits(graph, [LayerSplit(layer, parts)], False)
    assert_runs_exact(plan_for, split, data)


def test_a_plan_with_splits_survives_its_file_and_runs(plan_for, tmp_path):
    import onnx

    from hetflow.plan.plan import Plan

    graph = GRAPHS[(8, 0)]
    path = tmp_path / "m.onnx"
    onnx.save(graph.onnx, path)
    from hetflow.model.reader import load_model

    graph = load_model(path)
    layer = _convs(graph)[0]
    split = LayerSplit(layer, channels_for([1, 1], output_channels(graph, layer)))
    g2 = apply_splits(graph, [split], False)
    parts = {f"{layer}/part0": "pe1", f"{layer}/part1": "pe2"}
    plan = plan_for(g2, {l.name: parts.get(l.name, "pe0") for l in g2.layers})
    plan.model_source, plan.splits = str(path), [split]
    back = Plan.load(plan.save(tmp_path / "p.json"))
    assert back.splits == [split]
    rebuilt = load_plan_model(back)
    assert [l.name for l in rebuilt.layers] == [l.name for l in g2.layers]
    report = run_plan(back, frames=9, warmup=1, check="all")
    assert report.checked_frames == 9 and report.max_abs_error < 1e-4


def _row_convs(graph):
    return [l.name for l in graph.layers if l.op_type.split("+")[0] == "Conv" and
            output_rows(graph, l.name) >= 2]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(GRAPHS)), data=st.data())
def test_row_split_plans_equal_the_unsplit_model_frame_by_frame(plan_for, key, data):
    graph = GRAPHS[key]
    layer = data.draw(st.sampled_from(_row_convs(graph)), label="layer")
    rows = output_rows(graph, layer)
    k = data.draw(st.integers(2, min(3, rows)), label="parts")
    parts = rows_for(data.draw(st.lists(st.floats(0.1, 1), min_size=k, max_size=k)), rows)
    split = apply_splits(graph, [LayerSplit(layer, parts, "rows")], False)
    assert_runs_exact(plan_for, split, data)


def test_a_zoo_cnn_with_row_and_channel_splits_runs_across_two_elements(plan_for, tmp_path):
    """emotion_ferplus (fused Conv+BN+ReLU layers): its first layer split by rows, its widest
    by channels, each part on an element of its own, saved and run from the plan file."""
    import pytest

    from hetflow.plan.plan import Plan
    from hetflow.model.reader import load_model

    zoo = pytest.importorskip("hetflow.model.zoo")
    path = zoo.cached_model_path("emotion_ferplus")
    graph = load_model(path, fuse=True)
    convs = [l for l in graph.layers if l.op_type.startswith("Conv")]
    first = convs[0].name
    widest = max(convs[1:], key=lambda l: output_channels(graph, l.name)).name
    splits = [LayerSplit(first, rows_for([2, 1], output_rows(graph, first)), "rows"),
              LayerSplit(widest, channels_for([1, 3], output_channels(graph, widest)))]
    g2 = apply_splits(graph, splits, True)
    place = {f"{first}/slice1": "pe1", f"{first}/part1": "pe1", f"{widest}/part1": "pe1"}
    plan = plan_for(g2, {l.name: place.get(l.name, "pe0") for l in g2.layers})
    plan.model_source, plan.splits, plan.fuse = str(path), splits, True
    back = Plan.load(plan.save(tmp_path / "p.json"))
    assert back.splits == splits
    report = run_plan(back, frames=5, warmup=1, check="all")
    assert report.checked_frames == 5 and report.max_abs_error < 1e-4
    # the file names each split's axis by its key; one that gives no sizes is refused
    import json

    from hetflow.errors import InputError

    d = json.loads((tmp_path / "p.json").read_text())
    assert d["splits"][0] == {"layer": first, "rows": list(splits[0].sizes)}
    assert d["splits"][1] == {"layer": widest, "channels": list(splits[1].sizes)}
    del d["splits"][0]["rows"]
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(InputError, match=f"bad.json: splits: split of layer {first!r} must "
                                         "give exactly one of 'channels' or 'rows'"):
        Plan.load(tmp_path / "bad.json")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(GRAPHS)), data=st.data())
def test_several_splits_along_either_axis_stay_live_and_exact(plan_for, key, data):
    """Two or three convolutions of one DAG split at once, each by rows or channels, parts
    anywhere (a row part's Slice too): every frame equals the unsplit model's."""
    graph = GRAPHS[key]
    convs = _row_convs(graph)
    chosen = data.draw(st.lists(st.sampled_from(convs), min_size=min(2, len(convs)),
                                max_size=min(3, len(convs)), unique=True), label="layers")
    splits = []
    for layer in chosen:
        axis = data.draw(st.sampled_from(["rows", "channels"] if layer in _convs(graph)
                                         else ["rows"]), label="axis")
        total = output_rows(graph, layer) if axis == "rows" else output_channels(graph, layer)
        k = data.draw(st.integers(2, min(3, total)), label="parts")
        fr = data.draw(st.lists(st.floats(0.1, 1), min_size=k, max_size=k), label="ratio")
        splits.append(LayerSplit(layer, channels_for(fr, total, axis), axis))
    split = apply_splits(graph, splits, False)
    pool = data.draw(st.sampled_from(POOLS), label="pool")
    assignment = {l.name: data.draw(st.sampled_from(pool)) for l in split.layers}
    plan = plan_for(split, assignment, data.draw(st.integers(1, 3), label="capacity"))
    report = run_plan(plan, split, frames=7, warmup=1, check="all")
    assert report.checked_frames == 7 and report.max_abs_error < 1e-4
