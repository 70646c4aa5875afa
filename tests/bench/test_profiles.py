"""The bench's own profile: under a time limit the baselines' element shapes are measured
first, and so is every GPU at every precision the search may choose (without its layer times
the search could not offer that precision at all)."""
from hetflow.bench import profiles
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform import CpuCluster, Platform
from hetflow.platform.spec import Gpu
from hetflow.profile.profile import Profile

from tests.patching import patch_everywhere


def test_every_gpu_precision_is_required_under_a_time_limit(monkeypatch, tmp_path):
    monkeypatch.setenv("HETFLOW_CACHE", str(tmp_path))
    graph = random_cnn_graph(6, 1)
    plat = Platform("t", (CpuCluster("c", (0, 1)),), (Gpu(0, "gpu", 1),))
    asked = {}

    def profile_model(graph, platform, elements, required, **kwargs):
        asked.update(elements=[e.name for e in elements], required=list(required))
        return Profile(graph.name, graph.model_hash, platform.name, platform.platform_hash)

    patch_everywhere(monkeypatch, "hetflow.bench.profiles", "profile_model", profile_model)
    patch_everywhere(monkeypatch, "hetflow.bench.profiles", "record_deviations",
                     lambda *a, **k: None)
    profiles.measure_profile(graph, plat, 2, lambda m: None, time_limit_s=1.0, precision="auto")
    gpus = {n for n in asked["elements"] if n.startswith("gpu0")}
    assert {"gpu0", "gpu0@fp16"} <= gpus
    assert gpus <= set(asked["required"])
    # the CPU shapes that are not the baselines' stay optional
    assert set(asked["elements"]) - set(asked["required"])


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
