"""Precision as a property of an element: YAML, names, hashes, settings and bad input."""
import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetflow.errors import InputError
from hetflow.platform import (PRECISIONS, PRECISIONS_OF_KIND, ProcessingElement, dump_platform,
                              platform_from_dict, with_precisions)
from hetflow.platform.load import load_platform
from hetflow.platform.precision import element_name, split_element_name

BASE = {
    "name": "board",
    "clusters": [{"name": "big", "cores": "0-3"}, {"name": "little", "cores": "4-7"}],
    "gpus": [{"index": 0, "name": "gpu", "driver_core": 7}],
}


def doc_with(cluster=None, gpu=None):
    d = copy.deepcopy(BASE)
    if cluster is not None:
        d["clusters"][0]["precision"] = cluster
    if gpu is not None:
        d["gpus"][0]["precision"] = gpu
    return d


def test_elements_carry_the_precision_of_their_device_and_show_it_in_their_name():
    p = platform_from_dict(doc_with(cluster="int8", gpu="fp16"), "p.yaml")
    names = {e.name: e.precision for e in p.elements("big:2+2 little:3")}
    assert names == {"cpu0-1@int8": "int8", "cpu2-3@int8": "int8", "cpu4-6": "fp32",
                     "gpu0@fp16": "fp16"}
    gpu = p.elements()[-1]
    assert gpu.base_name == "gpu0" and gpu.device_index == 0


def test_fp32_leaves_names_dicts_and_the_platform_hash_as_they_were():
    plain = platform_from_dict(BASE, "p.yaml")
    explicit = platform_from_dict(doc_with(cluster="fp32", gpu="fp32"), "p.yaml")
    assert explicit.platform_hash == plain.platform_hash
    assert "precision" not in dump_platform(explicit)
    assert [e.name for e in explicit.elements()] == ["cpu0-3", "cpu4-6", "gpu0"]
    assert all("precision" not in e.to_dict() for e in explicit.elements())


@pytest.mark.parametrize("cluster,gpu", [("int8", None), (None, "fp16"), (None, "tf32"),
                                         (None, "bf16")])
def test_another_precision_changes_the_hash_and_survives_a_round_trip(tmp_path, cluster, gpu):
    plain = platform_from_dict(BASE, "p.yaml")
    p = platform_from_dict(doc_with(cluster=cluster, gpu=gpu), "p.yaml")
    assert p.platform_hash != plain.platform_hash
    f = tmp_path / "p.yaml"
    f.write_text(dump_platform(p))
    back = load_platform(f)
    assert back.platform_hash == p.platform_hash
    assert [e.to_dict() for e in back.elements()] == [e.to_dict() for e in p.elements()]
    assert [ProcessingElement.from_dict(e.to_dict()) for e in p.elements()] == p.elements()


@pytest.mark.parametrize("cluster,gpu,where,says", [
    ("fp16", None, "clusters[0].precision", "a cpu element runs fp32 or int8, not fp16"),
    (None, "int8", "gpus[0].precision", "a gpu element runs fp32 or tf32 or fp16 or bf16"),
    (None, "fp8", "gpus[0].precision", "unknown precision 'fp8'"),
    ("FP32", None, "clusters[0].precision", "unknown precision 'FP32'"),
])
def test_a_precision_the_kind_cannot_run_is_one_line_naming_the_setting(cluster, gpu, where,
                                                                         says):
    with pytest.raises(InputError) as e:
        platform_from_dict(doc_with(cluster=cluster, gpu=gpu), "p.yaml")
    assert str(e.value).startswith(f"p.yaml: {where}: ") and says in str(e.value)
    assert "\n" not in str(e.value)


def test_an_element_built_directly_is_checked_too():
    with pytest.raises(InputError, match=r"element 'cpu0': precision: a cpu element runs"):
        ProcessingElement("cpu0", "cpu", (0,), precision="fp16")
    with pytest.raises(InputError, match=r"element 'gpu0@int8'"):
        ProcessingElement.from_dict({"name": "gpu0@int8", "kind": "gpu", "cores": [7],
                                     "precision": "int8"})


def test_an_accelerator_name_cannot_look_like_a_precision():
    d = copy.deepcopy(BASE)
    d["accelerators"] = [{"name": "npu@fp16"}]
    with pytest.raises(InputError, match=r"accelerators\[0\]\.name: .*marks an element's"):
        platform_from_dict(d, "p.yaml")


def test_a_setting_names_targets_by_name_or_kind_and_a_name_wins():
    p = platform_from_dict(BASE, "p.yaml")
    q = with_precisions(p, "cpu=int8 little=fp32,gpu0=bf16")
    assert [e.name for e in q.elements()] == ["cpu0-3@int8", "cpu4-6", "gpu0@bf16"]
    assert with_precisions(q, {"cpu": "fp32", "gpu": "fp32"}).platform_hash == p.platform_hash


@pytest.mark.parametrize("setting,says", [
    ("gpu1=fp16", "--precision: gpu1=fp16: platform 'board' has no GPU, cluster or accelerator"),
    ("big=fp16", "--precision: big=fp16: a cpu element runs fp32 or int8, not fp16"),
    ("gpu=int8", "--precision: gpu=int8: a gpu element runs"),
    ("gpu=half", "--precision: gpu=half: unknown precision 'half'"),
    ("gpu:fp16", "--precision: cannot read 'gpu:fp16'"),
    ("gpu=fp16 gpu=fp32", "--precision: 'gpu' is given twice"),
])
def test_a_bad_setting_is_one_line_naming_it(setting, says):
    with pytest.raises(InputError) as e:
        with_precisions(platform_from_dict(BASE, "p.yaml"), setting)
    assert str(e.value).startswith(says)


def test_equal_elements_of_different_precision_do_not_share_a_profile():
    p = platform_from_dict(BASE, "p.yaml")
    q = with_precisions(p, "cpu=int8 gpu=fp16")
    for a, b in zip(p.elements(), q.elements()):
        assert a.equivalence_key != b.equivalence_key


@given(base=st.sampled_from(["gpu0", "cpu0-3", "cpu0,3-5", "npu", "cpu2"]),
       precision=st.sampled_from(PRECISIONS))
def test_a_name_splits_back_into_its_base_and_precision(base, precision):
    name = element_name(base, precision)
    assert split_element_name(name) == (base, precision)
    assert (name == base) == (precision == "fp32")


def test_every_kind_runs_fp32():
    assert all(ks[0] == "fp32" for ks in PRECISIONS_OF_KIND.values())


def test_the_cli_says_a_bad_precision_in_one_line_and_exits_2(tmp_path):
    import subprocess
    import sys

    f = tmp_path / "p.yaml"
    f.write_text("name: x\nclusters: [{name: big, cores: '0-1', precision: fp16}]\n")
    done = subprocess.run([sys.executable, "-m", "hetflow", "platform", "show", str(f)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.strip().splitlines() == [
        f"hetflow: error: {f}: clusters[0].precision: a cpu element runs fp32 or int8, not fp16"]
