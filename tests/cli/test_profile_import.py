"""`hetflow profile MODEL --from-table TABLE`: a profile from times measured elsewhere, which
`map` then uses; a table naming an element the platform lacks exits 2, naming it, and writes
nothing."""
import json

from hetflow.model import resolve_model
from hetflow.profile import Profile


def test_a_json_table_becomes_a_profile_that_map_uses(hetflow, tmp_path):
    graph = resolve_model("squeezenet1_0", fuse=True)
    table = tmp_path / "t.json"
    table.write_text(json.dumps({e: {l.name: 0.5 for l in graph.layers} for e in ("cpu0", "gpu0")}))
    out = tmp_path / "p.json"
    code, stdout, err = hetflow("profile", "squeezenet1_0", "-p", "jetson_tx2", "--from-table",
                                table, "-o", out)
    assert code == 0, err
    assert "imported from" in stdout and "have no times" not in stdout
    assert "left out of the profile" in err  # the board's other elements
    prof = Profile.load(out)
    assert set(prof.layer_times) == {"cpu0", "gpu0"} and prof.meta["method"] == "imported"
    code, stdout, err = hetflow("map", "squeezenet1_0", "--profile", out, "-p", "jetson_tx2",
                                "--strategy", "pipeline", "-o", tmp_path / "plan.json")
    assert code == 0, err


def test_a_table_with_a_wrong_element_exits_2_naming_it(hetflow, tmp_path):
    wrong = tmp_path / "w.json"
    wrong.write_text(json.dumps({"gpu9": {"x": 1}}))
    code, _, err = hetflow("profile", "squeezenet1_0", "-p", "jetson_tx2", "--from-table", wrong,
                           "-o", tmp_path / "q.json")
    assert code == 2 and "'gpu9' are not elements of platform jetson_tx2" in err
    assert not (tmp_path / "q.json").exists()
