"""The search over element precisions: each precision an element variant, each device at one
precision in a configuration, the profile's deviation keeping out what misses the tolerance."""
import pytest
from hypothesis import given, settings, strategies as st

from hetflow.errors import InputError
from hetflow.mapping.from_profile import (precision_configurations, problem_from_profile,
                                          searched_elements)
from hetflow.model.accuracy import Tolerance
from hetflow.model.synthetic import random_cnn_model
from hetflow.model.reader import normalise, to_cnn_graph
from hetflow.platform import resolve_platform
from hetflow.platform.precision import (PRECISIONS_OF_KIND, precision_settings,
                                        precision_variants)
from hetflow.profile.estimate import estimate_profile


@pytest.fixture(scope="module")
def graph():
    return to_cnn_graph(normalise(random_cnn_model(6, seed=3), "random", {}), "random")


@pytest.fixture(scope="module")
def jetson():
    return resolve_platform("jetson_tx2")  # two clusters and a GPU


def every_precision(platform):
    return [e for v in precision_variants(platform, "auto") for e in searched_elements(v)]


def deviation(rel_l2: float) -> dict:
    return {"outputs": [{"name": "y", "rel_l2_worst": rel_l2, "max_abs_worst": rel_l2,
                         "top1_agreement": None}]}


def one_precision_per_device(problem) -> bool:
    for names in problem.configurations:
        seen = {}
        for n in names:
            e = problem.element(n)
            device = e.cluster if e.kind == "cpu" else e.base_name
            if seen.setdefault(device, e.precision) != e.precision:
                return False
    return True


def test_auto_offers_every_combination_of_the_devices_precisions(jetson):
    settings_ = precision_settings(jetson, "auto")
    n = len(PRECISIONS_OF_KIND["gpu"]) * len(PRECISIONS_OF_KIND["cpu"]) ** 2
    assert len(settings_) == n == len({tuple(sorted(s.items())) for s in settings_})
    assert precision_settings(jetson, "fp32") == precision_settings(jetson, None) == [{}]
    assert precision_settings(jetson, "gpu=fp16 a57=int8") == [{"gpu": "fp16", "a57": "int8"}]


@pytest.mark.parametrize("setting, says", [("cpu=fp16", "cpu=fp16"), ("gpu=int8", "gpu=int8"),
                                           ("npu=fp16", "npu"), ("gpu:fp16", "gpu:fp16"),
                                           ("gpu=fp8", "fp8")])
def test_a_bad_setting_is_refused_naming_it(jetson, setting, says):
    with pytest.raises(InputError, match=says):
        precision_settings(jetson, setting)


def test_auto_searches_each_device_at_one_precision(graph, jetson):
    prof = estimate_profile(graph, jetson, elements=every_precision(jetson))
    problem = problem_from_profile(graph, prof, jetson, precision="auto")
    assert {e.precision for e in problem.elements} == {"fp32", "tf32", "fp16", "bf16", "int8"}
    assert one_precision_per_device(problem)
    # fp32 alone is what a search without --precision sees: nothing changes silently
    plain = problem_from_profile(graph, prof, jetson)
    assert {e.precision for e in plain.elements} == {"fp32"}


@settings(max_examples=25, deadline=None)
@given(failing=st.sets(st.sampled_from(["gpu0@fp16", "gpu0@bf16", "gpu0@tf32", "a57@int8",
                                        "denver@int8"])),
       limit=st.sampled_from([0.01, 0.05, 0.2]))
def test_auto_offers_only_the_precisions_within_the_tolerance(graph, jetson, failing, limit):
    elements = every_precision(jetson)
    prof = estimate_profile(graph, jetson, elements=elements)
    prof.estimated = False  # measured: every element of another precision needs its check
    bad = {e.name for e in elements
           if f"{e.cluster if e.kind == 'cpu' else e.base_name}@{e.precision}" in failing}
    prof.meta["deviation"] = {e.name: deviation(2 * limit if e.name in bad else limit / 2)
                              for e in elements if e.precision != "fp32"}
    configs = precision_configurations(prof, jetson, "auto", Tolerance(rel_l2=limit))
    offered = {e.name for c in configs for e in c.elements}
    assert not offered & bad
    assert offered == {e.name for e in elements} - bad
    assert one_precision_per_device(problem_from_profile(graph, prof, jetson, precision="auto",
                                                         tolerance=Tolerance(rel_l2=limit)))


def test_auto_leaves_out_an_element_the_profile_never_checked(graph, jetson):
    elements = every_precision(jetson)
    prof = estimate_profile(graph, jetson, elements=elements)
    prof.estimated = False
    prof.meta["deviation"] = {e.name: deviation(0.0) for e in elements
                              if e.precision not in ("fp32", "bf16")}
    offered = {e.precision for c in precision_configurations(prof, jetson, "auto")
               for e in c.elements}
    assert offered == {"fp32", "tf32", "fp16", "int8"}


def test_a_setting_the_profile_never_measured_is_refused_naming_element_and_setting(graph,
                                                                                   jetson):
    prof = estimate_profile(graph, jetson)  # fp32 only
    with pytest.raises(InputError, match=r"no times for element gpu0@fp16 \(--precision "
                                         r"gpu=fp16\)"):
        problem_from_profile(graph, prof, jetson, precision="gpu=fp16")


def test_a_setting_that_misses_the_tolerance_is_refused_naming_the_element(graph, jetson):
    elements = [e for v in precision_variants(jetson, "gpu=fp16") for e in searched_elements(v)]
    prof = estimate_profile(graph, jetson, elements=elements)
    prof.meta["deviation"] = {"gpu0@fp16": deviation(0.3)}
    with pytest.raises(InputError, match=r"gpu0@fp16 \(--precision gpu=fp16\) misses the "
                                         r"tolerance.*rel_l2 0.3 > 0.05"):
        problem_from_profile(graph, prof, jetson, precision="gpu=fp16")
    problem = problem_from_profile(graph, prof, jetson, precision="gpu=fp16",
                                   tolerance=Tolerance(rel_l2=0.5))
    assert "gpu0@fp16" in problem.element_index and "gpu0" not in problem.element_index
