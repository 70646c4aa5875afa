"""Estimated profiles for machines that are not at hand: a roofline per layer.

time(layer, element) = overhead + max(FLOPs / (peak GFLOP/s * efficiency), bytes / bandwidth)
with bytes = activations read and written + weights. Peak rates are the platform description's
nominal figures, so with efficiency 1 the times are optimistic lower bounds; relative order
between elements is what a mapping search mostly needs. An accelerator with a `speed_factor`
takes the time of its reference cluster divided by that factor (Kang et al. 2020, IV-C).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping

from hetflow.errors import InputError
from hetflow.platform.spec import ProcessingElement, cpu_element_name
from hetflow.profile.measure import _element_info, _new_profile, _resolve_elements
from hetflow.profile.profile import Profile

if TYPE_CHECKING:
    from hetflow.model.graph import CnnGraph, Layer
    from hetflow.platform.spec import Platform

DEFAULT_EFFICIENCY = {"cpu": 1.0, "gpu": 1.0, "accel": 1.0}
# fixed cost of starting one layer: a thread-pool dispatch on a CPU, a kernel launch on a GPU
DEFAULT_OVERHEAD_S = {"cpu": 5e-6, "gpu": 1e-5, "accel": 5e-5}
# link guesses where the platform gives none: latency, and 1/(~10 GB/s) per byte
DEFAULT_COMM = {"cpu->cpu": {"a": 1e-5, "b": 1e-10}, "cpu->gpu": {"a": 3e-5, "b": 1e-10},
                "gpu->cpu": {"a": 3e-5, "b": 1e-10}, "gpu->gpu": {"a": 3e-5, "b": 1e-10}}


def layer_bytes(graph: "CnnGraph", layer: "Layer") -> int:
    acts = sum(graph.tensors[t].nbytes for t in (*layer.inputs, *layer.outputs)
               if t in graph.tensors)
    return acts + layer.param_bytes


def roofline_time(flops: float, nbytes: float, element: ProcessingElement,
                  efficiency: float, overhead_s: float, source: str) -> float:
    if not element.peak_gflops or not element.mem_gbps:
        missing = "peak_gflops" if not element.peak_gflops else "mem_gbps"
        where = (f"cluster {element.cluster!r} (peak_gflops_per_core / mem_gbps)"
                 if element.kind == "cpu" else f"{element.name!r}")
        raise InputError(f"{source}: element {element.name} has no nominal {missing}; "
                         f"give it for {where} in the platform YAML to estimate a profile")
    return overhead_s + max(flops / (element.peak_gflops * 1e9 * efficiency),
                            nbytes / (element.mem_gbps * 1e9))


def estimate_profile(graph: "CnnGraph", platform: "Platform",
                     elements: Iterable[ProcessingElement | str] | None = None,
                     efficiency: Mapping[str, float] | None = None,
                     overhead_s: Mapping[str, float] | None = None) -> Profile:
    """A Profile with `estimated=True` from layer FLOPs/bytes and nominal peak rates."""
    eff = {**DEFAULT_EFFICIENCY, **(efficiency or {})}
    ovh = {**DEFAULT_OVERHEAD_S, **(overhead_s or {})}
    source = platform.source or platform.name
    prof = _new_profile(graph, platform, estimated=True)
    prof.meta.update(method="roofline", efficiency=eff, overhead_s=ovh)
    wanted = _resolve_elements(platform, elements)
    by_name = {e.name: e for e in platform.all_elements()}

    def times_on(e: ProcessingElement) -> dict[str, dict[str, float]]:
        out = {}
        for l in graph.layers:
            t = roofline_time(float(l.flops or 0), layer_bytes(graph, l), e, eff[e.kind],
                              ovh[e.kind], source)
            out[l.name] = {"median": t, "p10": t, "p90": t, "n": 0}
        return out

    for e in wanted:
        if e.speed_factor is not None and e.relative_to:
            ref = by_name[cpu_element_name(platform.free_cores(platform.cluster(e.relative_to)))]
            prof.layer_times[e.name] = {
                l: {"median": s["median"] / e.speed_factor, "p10": s["p10"] / e.speed_factor,
                    "p90": s["p90"] / e.speed_factor, "n": 0}
                for l, s in times_on(ref).items()}
            prof.elements[e.name] = _element_info(
                e, e.name, derived=f"{ref.name} / speed_factor {e.speed_factor}")
        else:
            prof.layer_times[e.name] = times_on(e)
            prof.elements[e.name] = _element_info(e, e.name, peak_gflops=e.peak_gflops,
                                                  mem_gbps=e.mem_gbps)
        prof.cpu_freq_mhz[e.name] = e.freq_mhz if e.kind == "cpu" else None
    prof.comm = {**DEFAULT_COMM, **{k: dict(v) for k, v in platform.comm.items()}}
    prof.calibration = {"dvfs": False, "comm_source": {
        k: ("platform" if k in platform.comm else "default guess") for k in prof.comm}}
    return prof
