import os

import pytest

from hetflow.errors import InputError
from hetflow.model.synthetic import random_cnn_graph
from hetflow.platform import CpuCluster, Platform, detect_platform, load_platform, platform_from_dict
from hetflow.profile import Profile, estimate_profile, profile_model, profile_subnets

CORES = tuple(sorted(os.sched_getaffinity(0)))
FAST = dict(repeats=3, warmup=1, progress=False, comm_sizes=[1024, 65536], comm_repeats=2)


@pytest.fixture(scope="module")
def graph():
    return random_cnn_graph(10, seed=3, channels=8, size=16)


@pytest.fixture(scope="module")
def platform():
    return Platform("here", (CpuCluster("cpu", CORES[:2]),))


@pytest.fixture(scope="module")
def measured(graph, platform) -> Profile:
    return profile_model(graph, platform, **FAST)


def test_every_layer_on_every_element(graph, platform, measured):
    names = [e.name for e in platform.all_elements()]
    assert set(measured.layer_times) == set(names) == set(measured.elements)
    for e in names:
        assert set(measured.layer_times[e]) == {l.name for l in graph.layers}
        for st in measured.layer_times[e].values():
            assert 0 < st["p10"] <= st["median"] <= st["p90"] <= st["max"] and st["n"] == 3
    assert not measured.estimated and measured.model_hash == graph.model_hash
    measured.check_matches(graph, platform)


@pytest.mark.skipif(len(CORES) < 2, reason="needs 2 cores")
def test_equal_elements_are_measured_once(measured):
    assert measured.elements["cpu1"]["profiled_as"] == measured.elements["cpu0"]["profiled_as"] == "cpu0"
    assert measured.layer_times["cpu1"] == measured.layer_times["cpu0"]
    assert measured.elements["cpu0-1"]["profiled_as"] == "cpu0-1"
    assert set(measured.comm) == {"cpu->cpu"} and len(measured.comm_raw["cpu->cpu"]) == 2


@pytest.mark.skipif(len(CORES) < 2, reason="needs 2 cores")
def test_a_time_limit_measures_the_required_shapes_and_skips_the_others(graph, platform,
                                                                        tmp_path, monkeypatch):
    from hetflow.bench.profiles import _profile_path, cached_profile

    prof = profile_model(graph, platform, time_limit_s=0.0, required=["cpu1"], **FAST)
    assert set(prof.layer_times) == {"cpu0", "cpu1"}  # cpu1's shape, measured as cpu0
    assert prof.meta["partial"] and "time limit" in prof.meta["skipped"]["cpu0-1"]
    assert set(prof.comm) == {"cpu->cpu"}  # the links come before the optional shapes
    roomy = profile_model(graph, platform, time_limit_s=600.0, required=["cpu1"], **FAST)
    assert set(roomy.layer_times) == {"cpu0", "cpu1", "cpu0-1"} and "partial" not in roomy.meta
    # a cut-short profile is reused only by a bench that keeps a budget
    monkeypatch.setenv("HETFLOW_CACHE", str(tmp_path))
    prof.save(_profile_path(graph, platform))
    assert cached_profile(graph, platform, lambda m: None) is None
    assert cached_profile(graph, platform, lambda m: None, partial=True).meta["partial"]


def test_whole_model_and_layer_sum_are_reported(measured):
    report = measured.layer_sum_vs_whole()
    assert set(report) == set(measured.layer_times)
    for v in report.values():
        assert v["whole"] > 0 and v["layer_sum"] > 0 and v["ratio"] > 0


def test_chain_method_and_named_elements(graph, platform):
    prof = profile_model(graph, platform, elements=["cpu0"], method="chain", comm=False, **{
        k: v for k, v in FAST.items() if not k.startswith("comm")})
    assert list(prof.layer_times) == ["cpu0"] and prof.meta["method"] == "chain"
    assert all(st["n"] == 3 for st in prof.layer_times["cpu0"].values())
    with pytest.raises(InputError, match="has no element 'cpu7'"):
        profile_model(graph, platform, elements=["cpu7"], **FAST)
    with pytest.raises(InputError, match="profile method 'fast'"):
        profile_model(graph, platform, method="fast", **FAST)


def test_round_trip_of_a_measured_profile(tmp_path, measured):
    measured.save(tmp_path / "m.json")
    assert Profile.load(tmp_path / "m.json") == measured


def test_subnet_times(graph, platform, measured):
    names = [l.name for l in graph.layers]
    prof = profile_subnets(graph, platform, [names[:4], ("cpu0", names[4:])], profile=measured,
                           repeats=3, warmup=1)
    assert prof is measured
    assert prof.subnet_time(names[:4], "cpu0-1") is not None
    assert prof.subnet_time(names[4:], "cpu0") > 0
    assert prof.subnet_time(names[4:], "cpu0-1") is None  # asked on cpu0 only
    assert prof.stage_time(names[:4], "cpu0") == prof.subnet_time(names[:4], "cpu0")
    other = random_cnn_graph(5, seed=4)
    with pytest.raises(InputError, match="was made for model"):
        profile_subnets(other, platform, [[other.layers[0].name]], profile=measured)


def test_dvfs_calibration_records_its_factors(graph, platform, monkeypatch):
    import hetflow.profile.measure as m

    monkeypatch.setattr(m, "all_busy_freq_mhz", lambda cores, seconds=1.0: {c: 1000.0 for c in cores})
    monkeypatch.setattr(m, "observed_freq_mhz", lambda cores: 2000.0)
    prof = profile_model(graph, platform, elements=["cpu0"], dvfs_calibration=True, comm=False,
                         **{k: v for k, v in FAST.items() if not k.startswith("comm")})
    assert prof.calibration["dvfs"] and prof.calibration["factors"]["cpu0"] == pytest.approx(2.0)
    assert prof.cpu_freq_mhz["cpu0"] == 2000.0


def test_devices_must_be_present(graph):
    tx2 = load_platform("jetson_tx2")
    if set(tx2.cores) <= set(CORES):
        pytest.skip("this machine has the TX2's cores")
    with pytest.raises(InputError, match="is not available on this machine"):
        profile_model(graph, tx2, **FAST)


def test_accelerator_with_a_speed_factor_is_derived(graph):
    doc = {"name": "x", "clusters": [{"name": "cpu", "cores": list(CORES[:1])}],
           "accelerators": [{"name": "npu", "speed_factor": 4.0, "relative_to": "cpu"}]}
    prof = profile_model(graph, platform_from_dict(doc, "x.yaml"), **FAST)
    ref = f"cpu{CORES[0]}"
    l0 = graph.layers[0].name
    assert prof.layer_time(l0, "npu") == pytest.approx(prof.layer_time(l0, ref) / 4)


def test_estimated_profile(graph):
    hikey = load_platform("hikey970")
    prof = estimate_profile(graph, hikey)
    assert prof.estimated and prof.platform_hash == hikey.platform_hash
    assert set(prof.layer_times) == {e.name for e in hikey.all_elements()}
    conv = next(l for l in graph.layers if l.op_type == "Conv")
    # the big cores are faster than the LITTLE ones, the NPU is the big cluster / 6.5
    assert prof.layer_time(conv.name, "cpu4-7") < prof.layer_time(conv.name, "cpu1-3")
    assert prof.layer_time(conv.name, "npu") == pytest.approx(
        prof.layer_time(conv.name, "cpu4-7") / 6.5)
    assert prof.comm["cpu->gpu"]["a"] == pytest.approx(5.7e-4)
    assert prof.calibration["comm_source"]["cpu->gpu"] == "platform"
    with pytest.raises(InputError, match="has no nominal peak_gflops"):
        estimate_profile(graph, detect_platform())


class _FakeClock:
    """The profiler's clock, advanced only by the fake device: the test cannot depend on how
    accurately a busy machine sleeps."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class _SlowDeviceRunner:
    """An ORT runner dressed as a device runner on a fake clock: `replay` (the device work)
    costs 2 ms of call overhead plus `work` seconds, `run` (host copies in, replay, copies
    out) 1 ms more than that."""

    def __init__(self, inner, clock, work):
        self.inner, self.inputs, self.outputs = inner, inner.inputs, inner.outputs
        self.caller_cores, self.clock, self.work = inner.caller_cores, clock, work

    def run(self, feeds):
        self._feeds = feeds
        out = self.inner.run(feeds)
        self.clock.now += 0.003 + self.work
        return out

    def replay(self):
        self.inner.run(self._feeds)
        self.clock.now += 0.002 + self.work

    def close(self):
        self.inner.close()


def test_device_runners_lose_their_call_overhead(graph, monkeypatch):
    import time
    from types import SimpleNamespace

    from hetflow.backends import Backend, get_backend, register_backend
    from hetflow.platform import Gpu

    clock = _FakeClock()
    monkeypatch.setattr("hetflow.profile.measure.time",
                        SimpleNamespace(perf_counter=clock.perf_counter, sleep=time.sleep))
    layer_work = 5e-4  # per layer; the one-ReLU calibration model does no work

    class SlowDevice(Backend):
        name, kinds = "slow-device-test", ("gpu",)

        def prepare(self, subnet, element, **opts):
            cpu0 = Platform("p", (CpuCluster("cpu", CORES[:1]),)).all_elements()[0]
            work = 0.0 if subnet.name == "call-overhead" else layer_work * len(subnet.layers)
            return _SlowDeviceRunner(get_backend("cpu").prepare(subnet, cpu0), clock, work)

    try:
        register_backend(SlowDevice.name, SlowDevice)
    except ValueError:
        pass
    plat = Platform("p", (CpuCluster("cpu", CORES),), gpus=(Gpu(0, "slow", CORES[-1],
                                                                backend=SlowDevice.name),))
    monkeypatch.setattr("hetflow.platform.detect.check_devices_present", lambda p: None)
    prof = profile_model(graph, plat, elements=["gpu0"], comm=False, repeats=5, warmup=1,
                         progress=False)
    assert prof.calibration["call_overhead_s"]["gpu0"] == pytest.approx(0.002)
    for name, st in prof.layer_times["gpu0"].items():
        assert st["median"] == pytest.approx(layer_work), name
    # the whole model as the runtime calls it: one call, copies included
    assert prof.whole_model["gpu0"]["median"] == pytest.approx(
        0.003 + layer_work * len(graph.layers))


def test_every_cpu_element_has_its_firings_border_cost(graph, platform, measured):
    """Measured once per element shape, copied to its equals, and read back by the problem."""
    from hetflow.mapping.from_profile import problem_from_profile

    names = [e.name for e in platform.all_elements()]
    borders = measured.calibration["border_s"]
    assert set(borders) == set(names)
    for e in names:
        a, b = measured.border_cost(e)
        assert a >= 0 and b >= 0 and (a, b) == (borders[e]["a"], borders[e]["b"])
    if "cpu1" in names:
        assert borders["cpu1"] == borders["cpu0"]
    assert Profile.from_dict(measured.to_dict()).border_cost("cpu0") == measured.border_cost("cpu0")
    assert measured.border_cost("gpu7") == (0.0, 0.0)  # never measured
    problem = problem_from_profile(graph, measured, platform)
    assert {e: problem.border_cost.get(e, (0.0, 0.0)) for e in names} == {
        e: measured.border_cost(e) for e in names}


def test_border_cost_grows_with_the_bytes_a_firing_moves():
    """A ReLU over 4 MiB run as the engine runs it costs more beyond its in-cache time than one
    over 64 KiB: the fit's slope is positive on any machine with caches."""
    from hetflow.backends import backend_for
    from hetflow.platform.spec import ProcessingElement
    from hetflow.profile.measure import border_cost

    e = ProcessingElement("cpu0", "cpu", CORES[:1])
    fit = border_cost(backend_for(e), e, CORES[-1] if len(CORES) > 1 else None,
                      sizes=(64 << 10, 4 << 20), repeats=10)
    assert fit["b"] > 0


def test_gpu_links_carry_the_engines_hand_off(monkeypatch, tmp_path, graph):
    """The cuda benchmark times copies alone; a channel to or from a GPU also wakes the other
    element's thread: its fit's intercept gains the measured hand-off, the cpu->cpu fit (whose
    benchmark hands off already) does not. A cached profile without it is measured again."""
    from hetflow.bench.profiles import _profile_path, cached_profile
    from hetflow.platform.spec import CpuCluster, Platform, ProcessingElement
    from hetflow.profile import comm as commbench
    from hetflow.profile.measure import _measure_comm, _Progress
    from hetflow.profile.profile import Profile

    sizes = [1024, 1 << 20]
    copies = {"cpu->gpu": [[1024.0, 1e-5], [float(1 << 20), 1e-5 + 1e-10 * (1 << 20)]],
              "gpu->cpu": [[1024.0, 2e-5], [float(1 << 20), 2e-5 + 1e-10 * (1 << 20)]]}
    monkeypatch.setattr("hetflow.profile.measure._cuda_available", lambda: True)
    monkeypatch.setattr(commbench, "bench_cuda", lambda *a, **k: copies)
    monkeypatch.setattr(commbench, "bench_cpu_handoff", lambda *a, **k: [[1024.0, 3e-5],
                                                                         [float(1 << 20), 4e-5]])
    calls = []
    monkeypatch.setattr(commbench, "bench_engine_handoff",
                        lambda src, dst, *a: calls.append((src, dst)) or 4e-5)
    cpus = [ProcessingElement("cpu0", "cpu", (0,)), ProcessingElement("cpu1", "cpu", (1,))]
    gpu = ProcessingElement("gpu0", "gpu", (1,), device_index=0)
    prof = Profile("m", "h", "p", "ph")
    with _Progress(False) as bar:
        _measure_comm(prof, [*cpus, gpu], sizes, 2, bar)
    assert calls == [(1, 0)]  # from the GPU's driving core to another core
    for link, pts in copies.items():
        fit = commbench.fit_linear([p[0] for p in pts], [p[1] for p in pts])
        assert prof.comm[link]["a"] == pytest.approx(fit["a"] + 4e-5)
        assert prof.comm[link]["b"] == pytest.approx(fit["b"]) and prof.comm[link]["handoff"] == 4e-5
    assert "handoff" not in prof.comm["cpu->cpu"]
    assert prof.transfer_time(1024, cpus[0], gpu) == pytest.approx(prof.comm["cpu->gpu"]["a"]
                                                                 + prof.comm["cpu->gpu"]["b"] * 1024)
    # a cached profile whose GPU links lack the hand-off is not reused
    plat = Platform("p", (CpuCluster("cpu", (0,)),))
    monkeypatch.setenv("HETFLOW_CACHE", str(tmp_path))
    old = profile_model(graph, plat, elements=["cpu0"], comm=False,
                        **{k: v for k, v in FAST.items() if not k.startswith("comm")})
    old.comm_raw["cpu->gpu"] = copies["cpu->gpu"]
    old.comm["cpu->gpu"] = commbench.fit_linear([1024, 1 << 20], [p[1] for p in copies["cpu->gpu"]])
    old.save(_profile_path(graph, plat))
    assert cached_profile(graph, plat, lambda m: None) is None
    old.comm["cpu->gpu"]["handoff"] = 4e-5
    old.save(_profile_path(graph, plat))
    assert cached_profile(graph, plat, lambda m: None) is None  # nor the engine's firing cost
    old.calibration["engine_firing_s"] = 6e-6
    old.save(_profile_path(graph, plat))
    assert cached_profile(graph, plat, lambda m: None) is not None


@pytest.mark.skipif(len(CORES) < 2, reason="needs 2 cores")
def test_the_profile_measures_each_single_core_busy_beside_the_others(measured, graph, platform):
    """A copy of the whole model on every single core at once: each one's rate is kept (the
    slowdown `hetflow map` predicts with), the core groups' are not (they are not copies)."""
    busy = measured.calibration["busy_fps"]
    singles = {e.name for e in platform.all_elements() if len(e.cores) == 1}
    assert set(busy) == singles and all(v > 0 for v in busy.values())
    assert "contention" in measured.meta["phase_seconds"]
    off = profile_model(graph, platform, elements=["cpu0", "cpu1"], contention=False, comm=False,
                        **{k: v for k, v in FAST.items() if not k.startswith("comm")})
    assert "busy_fps" not in off.calibration


def test_the_profile_measures_the_engines_cost_per_firing(measured, graph, platform):
    """The engine's own cost per firing (a no-op model through the runtime) is measured with the
    links, and is the cost model's per-firing overhead; a profile without it (estimated, or made
    before it was measured) keeps the former constant."""
    from hetflow.mapping.from_profile import problem_from_profile

    firing = measured.calibration["engine_firing_s"]
    assert 1e-7 < firing < 1e-3  # microseconds: Python dispatch, not a model's work
    assert measured.engine_firing() == firing
    assert problem_from_profile(graph, measured, platform).call_overhead == firing
    older = Profile.from_dict(measured.to_dict())
    del older.calibration["engine_firing_s"]
    assert problem_from_profile(graph, older, platform).call_overhead == 30e-6
