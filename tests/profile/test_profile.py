import json

import pytest

from hetflow.errors import InputError
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform import load_platform
from hetflow.profile import PROFILE_VERSION, Profile


def make_profile(graph, platform) -> Profile:
    st = {"median": 1e-3, "p10": 9e-4, "p90": 1.2e-3, "n": 5}
    return Profile(
        model_name=graph.name, model_hash=graph.model_hash, platform_name=platform.name,
        platform_hash=platform.platform_hash,
        elements={"cpu0": {"kind": "cpu", "cores": [0]}, "cpu1": {"kind": "cpu", "cores": [1]},
                  "gpu0": {"kind": "gpu", "cores": [7]}, "npu": {"kind": "accel", "cores": []}},
        layer_times={"cpu0": {l.name: dict(st) for l in graph.layers}},
        comm={"cpu->cpu": {"a": 1e-5, "b": 1e-10}, "cpu->gpu": {"a": 2e-5, "b": 2e-10}},
        comm_raw={"cpu->cpu": [[1024.0, 1.1e-5]]}, meta={"fused": False})


@pytest.fixture
def graph():
    return random_cnn_graph(6, seed=1)


@pytest.fixture
def platform():
    return load_platform("hikey970")


def test_json_round_trip(tmp_path, graph, platform):
    prof = make_profile(graph, platform)
    path = prof.save(tmp_path / "sub" / "p.json")
    assert [p.name for p in path.parent.iterdir()] == ["p.json"]  # no temporary left behind
    again = Profile.load(path)
    assert again == prof and again.source == str(path)
    assert json.loads(path.read_text())["version"] == PROFILE_VERSION


def test_lookups(graph, platform):
    prof = make_profile(graph, platform)
    first = graph.layers[0].name
    assert prof.layer_time(first, "cpu0") == 1e-3
    assert prof.stage_time([l.name for l in graph.layers[:3]], "cpu0") == pytest.approx(3e-3)
    prof.subnet_times["cpu0"] = {"+".join(sorted(l.name for l in graph.layers[:3])):
                                 {"median": 2e-3, "p10": 2e-3, "p90": 2e-3, "n": 1}}
    assert prof.stage_time([l.name for l in graph.layers[:3]], "cpu0") == 2e-3
    with pytest.raises(InputError, match="no time for layer 'nope' on 'cpu0'"):
        prof.layer_time("nope", "cpu0")
    with pytest.raises(InputError, match="no times for element 'cpu9'"):
        prof.layer_time(first, "cpu9")


def test_transfer_time(graph, platform):
    prof = make_profile(graph, platform)
    assert prof.transfer_time(10**6, "cpu0", "cpu0") == 0.0
    assert prof.transfer_time(10**6, "cpu0", "cpu1") == pytest.approx(1e-5 + 1e-4)
    assert prof.transfer_time(1000, "cpu0", "gpu0") == pytest.approx(2e-5 + 2e-7)
    # an accelerator is reached like a GPU (Kang et al.) unless the profile says otherwise
    assert prof.transfer_time(1000, "cpu0", "npu") == prof.transfer_time(1000, "cpu0", "gpu0")
    with pytest.raises(InputError, match="no communication model for gpu->cpu"):
        prof.transfer_time(1000, "gpu0", "cpu0")
    elem = platform.all_elements()[0]
    assert prof.transfer_time(1000, elem, elem) == 0.0


def test_stale_profiles_are_refused(tmp_path, graph, platform):
    prof = make_profile(graph, platform)
    prof.save(tmp_path / "p.json")
    prof = Profile.load(tmp_path / "p.json")
    prof.check_matches(graph, platform)
    other = random_cnn_graph(6, seed=2)
    with pytest.raises(InputError, match=rf"profile {tmp_path}/p.json was made for model "
                                         rf"{graph.name} \(hash .*\), not {other.name}"):
        prof.check_matches(other, platform)
    with pytest.raises(InputError, match="was made for platform hikey970 .*, not galaxy_s9"):
        prof.check_matches(graph, load_platform("galaxy_s9"))
    del prof.layer_times["cpu0"][graph.layers[2].name]
    with pytest.raises(InputError, match=rf"no time for layer '{graph.layers[2].name}'.*fuse=False"):
        prof.check_matches(graph, platform)


def test_bad_files(tmp_path):
    f = tmp_path / "p.json"
    f.write_text("{not json")
    with pytest.raises(InputError, match="not a hetflow profile"):
        Profile.load(f)
    f.write_text(json.dumps({"model_hash": "x", "layer_times": {}, "version": 99}))
    with pytest.raises(InputError, match="p.json: not a valid hetflow profile: version: expected 1, "
                                         "got 99"):
        Profile.load(f)
    f.write_text(json.dumps([1]))
    with pytest.raises(InputError, match=r"not a valid hetflow profile: \(top level\): expected a "
                                         "JSON object"):
        Profile.load(f)
    with pytest.raises(InputError, match="cannot read"):
        Profile.load(tmp_path / "missing.json")


def test_call_overhead(graph, platform):
    prof = make_profile(graph, platform)
    assert prof.call_overhead("cpu0", default=3e-5) == 3e-5
    prof.calibration["call_overhead_s"] = {"cpu0": 4e-6}
    assert prof.call_overhead("cpu0") == 4e-6
