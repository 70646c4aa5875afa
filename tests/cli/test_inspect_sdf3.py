"""`hetflow inspect MODEL --sdf3 X --profile P --element E` writes the profile's layer times."""
import xml.etree.ElementTree as ET

import onnx

from hetflow.model.reader import load_model
from hetflow.model.synthetic import random_cnn_model
from hetflow.platform import load_platform
from hetflow.profile import estimate_profile


def test_inspect_writes_the_profiles_times(hetflow, tmp_path):
    model = tmp_path / "tiny.onnx"
    onnx.save(random_cnn_model(6, seed=3), model)
    graph = load_model(model, fuse=False)
    prof = estimate_profile(graph, load_platform("hikey970"))
    prof.save(tmp_path / "p.json")
    out = tmp_path / "g.xml"
    code, _, err = hetflow("inspect", model, "--no-fuse", "--sdf3", out, "--profile",
                           tmp_path / "p.json", "--element", "cpu4-7")
    assert code == 0, err
    app = ET.parse(out).getroot().find("applicationGraph")
    written = {a.get("actor"): int(a.find("processor/executionTime").get("time"))
               for a in app.iter("actorProperties")}
    expected = {l.name: round(prof.layer_time(l.name, "cpu4-7") / 1e-6) for l in graph.layers}
    assert written == expected and any(expected.values())


def test_inspect_asks_which_element(hetflow, tmp_path):
    model = tmp_path / "tiny.onnx"
    onnx.save(random_cnn_model(4, seed=1), model)
    graph = load_model(model, fuse=False)
    estimate_profile(graph, load_platform("hikey970")).save(tmp_path / "p.json")
    code, _, err = hetflow("inspect", model, "--no-fuse", "--sdf3", tmp_path / "g.xml",
                           "--profile", tmp_path / "p.json")
    assert code != 0 and "--element" in err and not (tmp_path / "g.xml").exists()
    code, _, err = hetflow("inspect", model, "--profile", tmp_path / "p.json")
    assert code != 0 and "--sdf3" in err
