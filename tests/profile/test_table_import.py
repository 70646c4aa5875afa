"""Profiles imported from a table of per-layer times measured elsewhere: a table of a zoo model
on a bundled board gives a profile the mapping search takes; ONNX node names of fused layers
add up; wrong layer or element names are refused naming them; elements without times are kept
out with a warning (the CLI: tests/cli/test_profile_import.py)."""
import csv
import pytest
from hetflow.errors import InputError
from hetflow.mapping.from_profile import problem_from_profile
from hetflow.mapping.planner import search_plan
from hetflow.model import resolve_model
from hetflow.platform import resolve_platform
from hetflow.profile.table_import import import_profile


@pytest.fixture(scope="module")
def board():
    return resolve_platform("jetson_tx2")


@pytest.fixture(scope="module")
def graph():
    return resolve_model("squeezenet1_0", fuse=True)


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["layer", "element", "ms"])
        w.writerows(rows)
    return path


def elements_of(board):
    return [e.name for e in board.all_elements() if e.backend != "none"]


def test_a_table_of_a_zoo_model_gives_a_profile_the_search_takes(tmp_path, graph, board):
    els = elements_of(board)[:2]
    rows = [(l.name, e, 0.1 * (i + 1) * (j + 1)) for i, l in enumerate(graph.layers)
            for j, e in enumerate(els)]
    warnings = []
    prof = import_profile(graph, board, write_csv(tmp_path / "t.csv", rows), warnings.append)
    assert set(prof.layer_times) == set(els)
    first = graph.layers[0].name
    assert prof.layer_time(first, els[1]) == pytest.approx(0.2e-3)
    assert warnings and "left out of the profile" in warnings[0]
    prof.check_matches(graph, board)
    plan, _ = search_plan(problem_from_profile(graph, prof, board), "pipeline", board.name)
    assert set(plan.mapping.elements) <= set(els)


def test_onnx_node_names_of_a_fused_layer_add_up(tmp_path, graph, board):
    fused = next(l for l in graph.layers if len(l.nodes) > 1)
    el = elements_of(board)[0]
    rows = [(l.name, el, 1.0) for l in graph.layers if l is not fused]
    rows += [(n, el, 0.25) for n in fused.nodes]
    prof = import_profile(graph, board, write_csv(tmp_path / "t.csv", rows))
    assert prof.layer_time(fused.name, el) == pytest.approx(0.25e-3 * len(fused.nodes))
    # its first node missing (the first node alone shares the layer's name: the whole layer)
    partial = [r for r in rows if r[0] != fused.nodes[0]]
    with pytest.raises(InputError, match=f"layer {fused.name!r} has times for only some of its ONNX nodes"):
        import_profile(graph, board, write_csv(tmp_path / "p.csv", partial))


def test_wrong_names_are_refused_naming_them(tmp_path, graph, board):
    el = elements_of(board)[0]
    rows = [(l.name, el, 1.0) for l in graph.layers]
    with pytest.raises(InputError, match="match no layer or ONNX node of squeezenet1_0: 'conv99'"):
        import_profile(graph, board, write_csv(tmp_path / "a.csv", rows + [("conv99", el, 1.0)]))
    with pytest.raises(InputError, match="element\\(s\\) 'npu7' are not elements of platform"):
        import_profile(graph, board, write_csv(tmp_path / "b.csv", rows + [(rows[0][0], "npu7", 1)]))
    with pytest.raises(InputError, match=f"element '{el}' has no time for 1 layer"):
        import_profile(graph, board, write_csv(tmp_path / "c.csv", rows[1:]))
    with pytest.raises(InputError, match="on .* is given twice"):
        import_profile(graph, board, write_csv(tmp_path / "d.csv", rows + rows[:1]))
    bad = tmp_path / "e.csv"
    bad.write_text("layer,element,ms\nx,y,fast\n")
    with pytest.raises(InputError, match="e.csv: line 2: ms 'fast' is not a number"):
        import_profile(graph, board, bad)
