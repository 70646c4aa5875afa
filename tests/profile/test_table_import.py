"""`hetflow profile import`: a table of layer times measured elsewhere -> a hetflow profile."""
import csv
import json

import pytest
from typer.testing import CliRunner

from hetflow.cli.main import app
from hetflow.errors import InputError
from hetflow.model import resolve_model
from hetflow.platform import resolve_platform
from hetflow.profile import Profile
from hetflow.profile.table_import import import_table

runner = CliRunner()
MODEL, PLATFORM = "squeezenet1_0", "hikey970"


@pytest.fixture(scope="module")
def graphs():
    return resolve_model(MODEL, fuse=False), resolve_model(MODEL, fuse=True)


def node_table(path, graph, elements, ms=lambda i: 0.01 * (i + 1)):
    """A vendor-style CSV: one row per ONNX node per element."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["element", "layer", "ms", "note"])  # any column order, extra columns
        for e in elements:
            for i, l in enumerate(graph.layers):
                w.writerow([e, l.nodes[0], ms(i), "x"])
    return path


def test_a_per_node_table_of_a_zoo_model_imports_fused_and_maps(tmp_path, graphs):
    unfused, fused = graphs
    table = node_table(tmp_path / "t.csv", unfused, ["cpu4-7", "gpu0"])
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["profile", "import", str(table), "--model", MODEL, "-p", PLATFORM,
                            "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "warning" in r.output and "cpu1-3" in r.output  # elements without times are named
    prof = Profile.load(out)
    assert set(prof.layer_times) == {"cpu4-7", "gpu0"} and prof.meta["fused"] is True
    prof.check_matches(fused, resolve_platform(PLATFORM))
    node_ms = {l.nodes[0]: 0.01 * (i + 1) for i, l in enumerate(unfused.layers)}
    for l in fused.layers:  # a fused Conv+Relu takes the sum of its nodes' times
        want = sum(node_ms[n] for n in l.nodes) / 1e3
        assert prof.layer_time(l.name, "gpu0") == pytest.approx(want)
    assert any(len(l.nodes) > 1 for l in fused.layers)
    plan = tmp_path / "plan.json"
    r = runner.invoke(app, ["map", MODEL, "--profile", str(out), "-p", PLATFORM,
                            "--strategy", "pipeline", "-o", str(plan)])
    assert r.exit_code == 0, r.output


def test_json_rows_are_repeats_of_hetflow_layer_names(tmp_path, graphs):
    _, fused = graphs
    rows = [{"layer": l.name, "element": "cpu1", "ms": ms} for l in fused.layers
            for ms in (1.0, 3.0, 2.0)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(rows))
    prof, warnings = import_table(path, fused, resolve_platform(PLATFORM), elements=["cpu1"])
    st = prof.layer_times["cpu1"][fused.layers[0].name]
    assert st["median"] == pytest.approx(2e-3) and st["n"] == 3 and st["p10"] < st["p90"]
    assert warnings == [] and prof.meta["method"] == "imported"


def test_wrong_names_are_refused_and_named(tmp_path, graphs):
    unfused, _ = graphs
    table = node_table(tmp_path / "t.csv", unfused, ["gpu0", "tpu9"])
    rows = table.read_text().splitlines()
    rows[3] = rows[3].replace(unfused.layers[2].nodes[0], "/features/nope/Conv")
    table.write_text("\n".join(rows) + "\n")
    r = runner.invoke(app, ["profile", "import", str(table), "--model", MODEL, "-p", PLATFORM,
                            "-o", str(tmp_path / "p.json")])
    assert isinstance(r.exception, InputError)  # exit code 2 with one line, from main()
    msg = str(r.exception)
    assert "'/features/nope/Conv'" in msg and "'tpu9'" in msg and "hikey970" in msg
    assert not (tmp_path / "p.json").exists()


def test_an_element_without_every_layer_is_refused(tmp_path, graphs):
    unfused, fused = graphs
    table = node_table(tmp_path / "t.csv", unfused, ["gpu0"])
    rows = table.read_text().splitlines()
    gone = rows.pop(5).split(",")[1]
    table.write_text("\n".join(rows) + "\n")
    with pytest.raises(InputError, match=rf"element gpu0 has no time for 1 of .*'{gone}'"):
        import_table(table, unfused, resolve_platform(PLATFORM))


@pytest.mark.parametrize("text, match", [
    ("layer,element\nconv,gpu0\n", "no column ms"),
    ("layer,element,ms\nconv,gpu0,fast\n", "line 2: ms 'fast' is not a number"),
    ("layer,element,ms\nconv,gpu0,-1\n", "line 2: ms '-1' must be a finite time"),
    ("layer,element,ms\n", "no rows"),
])
def test_bad_tables_give_one_line_errors(tmp_path, graphs, text, match):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=match):
        import_table(path, graphs[0], resolve_platform(PLATFORM))
