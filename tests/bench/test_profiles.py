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
