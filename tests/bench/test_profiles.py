"""The bench's own profile: under a time limit the baselines' element shapes are measured
first, and so is every GPU at every precision the search may choose (without its layer times
the search could not offer that precision at all)."""
import time

from hetflow.bench import profiles
from hetflow.model.accuracy import Tolerance
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform import CpuCluster, Platform
from hetflow.platform.spec import Gpu
from hetflow.profile.profile import Profile

from tests.patching import patch_everywhere


def test_every_gpu_precision_is_required_under_a_time_limit(monkeypatch, tmp_path):
    """... every GPU precision the screen keeps: here fp16 misses the tolerance, so bf16 is
    profiled, and tf32 (no faster than bf16) is not."""
    monkeypatch.setenv("HETFLOW_CACHE", str(tmp_path))
    graph = random_cnn_graph(6, 1)
    plat = Platform("t", (CpuCluster("c", (0, 1)),), (Gpu(0, "gpu", 1),))
    asked = {}

    def profile_model(graph, platform, elements, required, **kwargs):
        asked.update(elements=[e.name for e in elements], required=list(required),
                     limit=kwargs["time_limit_s"])
        return Profile(graph.name, graph.model_hash, platform.name, platform.platform_hash)

    def deviation(graph, element):
        time.sleep(0.1)  # a whole-model run at this precision
        error = 0.3 if element.precision == "fp16" else 0.001
        return {"frames": 8, "passed": True, "outputs": [
            {"name": "y", "frames": 8, "rel_l2_worst": error, "rel_l2_median": error,
             "max_abs_worst": 0.1, "max_abs_median": 0.1, "top1_agreement": None}]}

    patch_everywhere(monkeypatch, "hetflow.bench.profiles", "profile_model", profile_model)
    patch_everywhere(monkeypatch, "hetflow.profile.deviation", "whole_model_deviation",
                     deviation)
    patch_everywhere(monkeypatch, "hetflow.bench.profiles", "record_deviations",
                     lambda *a, **k: None)
    prof, _ = profiles.measure_profile(graph, plat, 2, lambda m: None, time_limit_s=1.0,
                                       precision="auto")
    gpus = {n for n in asked["elements"] if n.startswith("gpu0")}
    assert gpus == {"gpu0", "gpu0@bf16"}
    assert gpus <= set(asked["required"])
    # the screen's two whole-model runs came out of the profile's time
    assert asked["limit"] <= 1.0 - 0.2
    assert set(prof.meta["screened"]) == {"gpu0@fp16", "gpu0@tf32"}
    assert "misses the tolerance" in prof.meta["screened"]["gpu0@fp16"]
    # the deviations the screen measured are the profile's record of them
    assert set(prof.meta["deviation"]) == {"gpu0@fp16", "gpu0@bf16"}
    # the CPU shapes that are not the baselines' stay optional
    assert set(asked["elements"]) - set(asked["required"])
    # a GPU at two precisions in the budget's estimate, as profiled
    assert {e.name for e in profiles.expected_elements(plat, "auto")
            if e.kind == "gpu"} == {"gpu0", "gpu0@fp16"}
    # and one screen before it in the budget's estimate; none without 'auto'
    assert profiles.screened_precisions(profiles.expected_elements(plat, "auto"), "auto") == 1
    assert profiles.screened_precisions(profiles.expected_elements(plat, None), None) == 0

    # a later bench reuses it unless its tolerance refuses the precision the screen kept
    prof.layer_times["gpu0@bf16"] = {}
    assert profiles._screen_outdated(prof, None) is None
    why = profiles._screen_outdated(prof, Tolerance(rel_l2=0.0001))
    assert "gpu0@bf16 misses this tolerance" in why and "gpu0@tf32" in why


def test_a_profile_timed_by_another_backend_revision_is_not_reused():
    """Elements that their backend timed at another revision are stale (a GPU element of a
    profile made before the GPU backend's revision 2 has none recorded, so it read as 1);
    CPU elements at revision 1 and elements derived from another one are not."""
    from hetflow.backends import backend_for

    plat = Platform("t", (CpuCluster("c", (0, 1)),), (Gpu(0, "gpu", 1),))
    elements = profiles.profiled_elements(plat, "auto")
    gpus = [e for e in elements if e.kind == "gpu"]
    assert gpus and backend_for(gpus[0]).revision == 2
    graph = random_cnn_graph(3, 0)
    prof = Profile(graph.name, graph.model_hash, plat.name, plat.platform_hash)
    for e in elements:
        prof.elements[e.name] = {"kind": e.kind}
    assert sorted(profiles.stale_elements(prof, elements)) == sorted(e.name for e in gpus)
    for e in gpus:
        prof.elements[e.name]["backend_revision"] = 2
    assert profiles.stale_elements(prof, elements) == []
    prof.elements[gpus[0].name] = {"kind": "gpu", "derived": "cpu0 / speed_factor 2"}
    assert profiles.stale_elements(prof, elements) == []
