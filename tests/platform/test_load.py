import copy

import pytest
import yaml

from hetflow.errors import InputError
from hetflow.platform import (bundled_platforms, dump_platform, load_platform,
                              platform_from_dict)

BASE = {
    "name": "board",
    "clusters": [
        {"name": "big", "cores": [0, 1, 2, 3], "max_freq_mhz": 2000},
        {"name": "little", "cores": "4-7", "max_freq_mhz": 1400},
    ],
    "gpus": [{"index": 0, "name": "gpu", "driver_core": 7}],
    "accelerators": [{"name": "npu", "speed_factor": 6.5, "relative_to": "big"}],
    "comm": {"cpu->gpu": {"a": 1e-5, "b": 1e-10}},
}


def with_change(path, value):
    """BASE with the setting at `path` (a tuple of keys/indices) set to `value` (None: removed)."""
    doc = copy.deepcopy(BASE)
    obj = doc
    for k in path[:-1]:
        obj = obj[k]
    if value is None:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value
    return doc


def test_base_document_loads():
    p = platform_from_dict(BASE, "platform.yaml")
    assert [c.name for c in p.clusters] == ["big", "little"]
    assert p.clusters[1].cores == (4, 5, 6, 7)
    assert p.driver_cores == {7}
    assert p.accelerators[0].backend == "none"


@pytest.mark.parametrize("name", bundled_platforms())
def test_bundled_platforms_load_and_round_trip(name):
    p = load_platform(name)
    again = platform_from_dict(yaml.safe_load(dump_platform(p)), "again.yaml")
    assert again.to_dict() == p.to_dict()
    assert again.platform_hash == p.platform_hash


def test_bundled_set_is_complete():
    assert set(bundled_platforms()) >= {"jetson_tx2", "khadas_vim3", "hikey970", "galaxy_s9"}


def test_bundled_specs_match_the_papers():
    s9 = load_platform("galaxy_s9")
    assert {c.name: (len(c.cores), c.max_freq_mhz) for c in s9.clusters} == {
        "big": (4, 2704), "little": (4, 1794)}
    tx2 = load_platform("jetson_tx2")
    assert sorted(len(c.cores) for c in tx2.clusters) == [2, 4]
    vim3 = load_platform("khadas_vim3")
    assert {c.name: c.max_freq_mhz for c in vim3.clusters} == {"big": 2200, "little": 1800}
    hikey = load_platform("hikey970")
    assert hikey.accelerators[0].speed_factor == 6.5


@pytest.mark.parametrize("path, value, message", [
    (("clusters", 1, "cores"), [3, 4], "platform.yaml: clusters[1].cores: core 3 is also in cluster 'big'"),
    (("clusters", 0, "freq"), 5, "platform.yaml: clusters[0].freq: unknown key"),
    (("bogus",), 1, "platform.yaml: bogus: unknown key"),
    (("clusters", 0, "cores"), None, "platform.yaml: clusters[0].cores: missing"),
    (("name",), None, "platform.yaml: name: missing"),
    (("clusters", 0, "cores"), "3-1", "platform.yaml: clusters[0].cores: bad core range '3-1'"),
    (("clusters", 0, "cores"), [0, 0], "platform.yaml: clusters[0].cores: core 0 listed twice"),
    (("clusters", 0, "cores"), [-1], "platform.yaml: clusters[0].cores[0]: expected an integer >= 0"),
    (("clusters", 1, "name"), "big", "platform.yaml: clusters[1].name: cluster 'big' listed twice"),
    (("clusters", 0, "max_freq_mhz"), -5, "platform.yaml: clusters[0].max_freq_mhz: expected a positive number"),
    (("gpus", 0, "driver_core"), 9, "platform.yaml: gpus[0].driver_core: core 9 is in no cluster"),
    (("gpus", 0, "index"), None, "platform.yaml: gpus[0].index: missing"),
    (("gpus", 0, "index"), "zero", "platform.yaml: gpus[0].index: expected an integer"),
    (("accelerators", 0, "relative_to"), "mid", "platform.yaml: accelerators[0].relative_to: no cluster named 'mid'"),
    (("accelerators", 0, "relative_to"), None, "platform.yaml: accelerators[0].relative_to: speed_factor and relative_to go together"),
    (("accelerators", 0, "name"), "gpu3", "platform.yaml: accelerators[0].name: 'gpu3' looks like"),
    (("comm", "cpu->npu"), {"a": 1, "b": 1}, "platform.yaml: comm.cpu->npu: unknown link"),
    (("comm", "cpu->gpu", "b"), None, "platform.yaml: comm.cpu->gpu.b: missing"),
    (("clusters",), "0-3", "platform.yaml: clusters: expected a list"),
])
def test_validation_errors_name_the_setting(path, value, message):
    with pytest.raises(InputError) as e:
        platform_from_dict(with_change(path, value), "platform.yaml")
    assert str(e.value).startswith(message)
    assert "\n" not in str(e.value)


def test_duplicate_gpu_index_and_shared_driver_core():
    doc = copy.deepcopy(BASE)
    doc["gpus"].append({"index": 0, "name": "other", "driver_core": 6})
    with pytest.raises(InputError, match=r"gpus\[1\].index: GPU index 0 listed twice"):
        platform_from_dict(doc, "platform.yaml")
    doc["gpus"][1] = {"index": 1, "name": "other", "driver_core": 7}
    with pytest.raises(InputError, match=r"gpus\[1\].driver_core: core 7 already drives or stages for gpu0"):
        platform_from_dict(doc, "platform.yaml")


def test_gpu_driver_core_defaults_to_last_free_core():
    doc = with_change(("gpus", 0, "driver_core"), None)
    doc["gpus"].append({"index": 1, "name": "gpu"})
    p = platform_from_dict(doc, "p.yaml")
    assert [g.driver_core for g in p.gpus] == [7, 6]


def test_empty_platform_and_non_mapping():
    with pytest.raises(InputError, match="nothing to run on"):
        platform_from_dict({"name": "x"}, "p.yaml")
    with pytest.raises(InputError, match="p.yaml: top level: expected a mapping"):
        platform_from_dict([1, 2], "p.yaml")


def test_files_and_yaml_errors(tmp_path):
    f = tmp_path / "board.yaml"
    f.write_text(yaml.safe_dump(BASE))
    assert load_platform(f).source == str(f)
    f.write_text("name: [unclosed\n")
    with pytest.raises(InputError, match=r"board.yaml: line \d+: not valid YAML"):
        load_platform(f)
    with pytest.raises(InputError, match="no such platform file or bundled platform"):
        load_platform(tmp_path / "missing.yaml")


def test_hash_ignores_names_but_not_structure():
    p = platform_from_dict(BASE, "a.yaml")
    renamed = platform_from_dict({**BASE, "name": "other", "description": "x"}, "b.yaml")
    assert renamed.platform_hash == p.platform_hash
    fewer = with_change(("clusters", 1, "cores"), [4, 5, 6])
    fewer["gpus"][0]["driver_core"] = 6
    assert platform_from_dict(fewer, "c.yaml").platform_hash != p.platform_hash


def test_check_devices_refuses_missing_cores_and_gpus():
    doc = {"name": "x", "clusters": [{"name": "c", "cores": [0, 4096]}]}
    with pytest.raises(InputError, match=r"x.yaml: clusters\[0\].cores: core 4096 is not available"):
        platform_from_dict(doc, "x.yaml").check_devices()
    doc = {"name": "x", "clusters": [{"name": "c", "cores": [0]}],
           "gpus": [{"index": 63, "name": "g", "driver_core": 0}]}
    with pytest.raises(InputError, match=r"x.yaml: gpus\[0\].index: GPU 63 does not exist"):
        platform_from_dict(doc, "x.yaml").check_devices()
    # a GPU without a hetflow backend is only described, never checked
    doc["gpus"][0]["backend"] = "none"
    platform_from_dict(doc, "x.yaml").check_devices()


def test_staging_cores_belong_to_the_gpu_element_and_to_no_cpu_element():
    doc = copy.deepcopy(BASE)
    doc["gpus"][0]["staging_cores"] = "5-6"
    p = platform_from_dict(doc, "platform.yaml")
    assert p.gpus[0].staging_cores == (5, 6)
    assert p.driver_cores == {5, 6, 7}
    gpu = next(e for e in p.all_elements() if e.kind == "gpu")
    assert gpu.cores == (7, 5, 6) and gpu.driver_core == 7
    assert all(not {5, 6, 7} & set(e.cores) for e in p.all_elements() if e.kind == "cpu")
    again = platform_from_dict(yaml.safe_load(dump_platform(p)), "again.yaml")
    assert again.gpus == p.gpus and again.platform_hash == p.platform_hash
    # none given: the document, and so the hash, of a platform from before staging cores
    assert "staging_cores" not in platform_from_dict(BASE, "p.yaml").to_dict()["gpus"][0]


@pytest.mark.parametrize("staging, message", [
    ([9], "gpus[0].staging_cores: core 9 is in no cluster"),
    ([7], "gpus[0].staging_cores: core 7 already drives or stages for gpu0"),
    ([], "gpus[0].staging_cores: no cores"),
    ("x", "gpus[0].staging_cores: bad core range 'x'"),
])
def test_bad_staging_cores_name_the_setting(staging, message):
    doc = copy.deepcopy(BASE)
    doc["gpus"][0]["staging_cores"] = staging
    with pytest.raises(InputError) as e:
        platform_from_dict(doc, "platform.yaml")
    assert message in str(e.value)


def test_a_default_driver_core_avoids_the_gpus_own_staging_cores():
    doc = with_change(("gpus", 0, "driver_core"), None)
    doc["gpus"][0]["staging_cores"] = [7]
    p = platform_from_dict(doc, "p.yaml")
    assert (p.gpus[0].driver_core, p.gpus[0].staging_cores) == (6, (7,))
