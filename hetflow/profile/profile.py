"""The Profile: measured (or estimated) times of layers and sub-networks on processing elements,
and fitted communication costs. Plain JSON, keyed by model and platform hash so a stale profile
is refused instead of silently used.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from hetflow.errors import InputError
from hetflow.io import atomic_write_text
from hetflow.model.subnet import subnet_key
from hetflow.schema import validate

if TYPE_CHECKING:
    from hetflow.model.graph import CnnGraph
    from hetflow.platform.spec import Platform, ProcessingElement

PROFILE_VERSION = 1
Stats = dict[str, float]  # {"median": s, "p10": s, "p90": s, "max": s, "n": int}


def _name(element: "str | ProcessingElement") -> str:
    return element if isinstance(element, str) else element.name


def _short(h: str) -> str:
    return h[:12] + "…" if len(h) > 12 else h


@dataclass
class Profile:
    model_name: str
    model_hash: str
    platform_name: str
    platform_hash: str
    estimated: bool = False
    # element name -> {"kind", "cores", "cluster", "profiled_as", ...}
    elements: dict[str, dict[str, Any]] = field(default_factory=dict)
    layer_times: dict[str, dict[str, Stats]] = field(default_factory=dict)  # [element][layer]
    subnet_times: dict[str, dict[str, Stats]] = field(default_factory=dict)  # [element][key]
    # [element]: the whole model as the runtime calls it (host arrays in and out, copies included)
    whole_model: dict[str, Stats] = field(default_factory=dict)
    # [element]: the whole model at k GPU lanes (hetflow.profile.lanes.measure_lanes)
    gpu_lanes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # [element]["b,k"]: the whole model at batch b on k lanes, seconds a firing of b frames
    # (hetflow.profile.lanes.measure_batches; a CPU element's only where a batch ran faster)
    gpu_batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    # [element][subnet key]: a stage of the model at its lane counts, timed alone
    # (hetflow.profile.lanes.measure_stage_lanes)
    stage_lanes: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    comm: dict[str, dict[str, float]] = field(default_factory=dict)  # "cpu->gpu": {"a", "b"}
    comm_raw: dict[str, list[list[float]]] = field(default_factory=dict)  # link: [[bytes, s], ...]
    cpu_freq_mhz: dict[str, float | None] = field(default_factory=dict)  # [element] observed
    # idle power of each part of the machine and busy power of each element, from its energy
    # counters (hetflow.profile.power; empty where not measured)
    power: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)  # how it was made: repeats, method, ...
    version: int = PROFILE_VERSION
    source: str = field(default="", compare=False)  # file it was read from, for messages

    def up_to_batch(self, max_batch: int | None) -> "Profile":
        """This profile with each batch table cut to batches of at most `max_batch` frames
        (`--max-batch`: everything the search and the baselines see of batches; None: as
        it is)."""
        if max_batch is None:
            return self
        if max_batch < 1:
            raise InputError(f"--max-batch {max_batch}: a firing takes at least one frame")
        return replace(self, gpu_batches={
            e: {key: row for key, row in table.items()
                if "," not in key or int(key.split(",")[0]) <= max_batch}  # "b,k"; notes stay
            for e, table in self.gpu_batches.items()})

    # ---- lookups ----
    def layer_stats(self, layer: str, element: "str | ProcessingElement") -> Stats:
        e = _name(element)
        try:
            return self.layer_times[e][layer]
        except KeyError:
            where = self.source or "the profile"
            if e not in self.layer_times:
                raise InputError(f"{where} has no times for element {e!r} (it has "
                                 f"{', '.join(sorted(self.layer_times)) or 'none'})") from None
            raise InputError(f"{where} has no time for layer {layer!r} on {e!r}") from None

    def layer_time(self, layer: str, element: "str | ProcessingElement") -> float:
        """Median seconds of `layer` on `element`."""
        return float(self.layer_stats(layer, element)["median"])

    def subnet_time(self, layers: Iterable[str], element: "str | ProcessingElement"
                    ) -> float | None:
        """Measured time of the sub-network made of `layers`, if it was profiled."""
        st = self.subnet_times.get(_name(element), {}).get(subnet_key(layers))
        return None if st is None else float(st["median"])

    def stage_time(self, layers: Iterable[str], element: "str | ProcessingElement") -> float:
        """The sub-network's measured time where known, else the sum of its layers' times."""
        layers = list(layers)
        t = self.subnet_time(layers, element)
        return t if t is not None else sum(self.layer_time(l, element) for l in layers)

    def call_overhead(self, element: "str | ProcessingElement", default: float = 0.0) -> float:
        """The fixed cost of one backend call on `element` that was taken off each layer time
        (a stage pays it once per run); `default` where none was measured."""
        return float(self.calibration.get("call_overhead_s", {}).get(_name(element), default))

    def engine_firing(self, default: float = 30e-6) -> float:
        """Seconds the runtime spends on one firing beyond its runner's work (dispatch, frame
        channels, in-order release), measured on this machine; `default` where it was not
        (a roofline profile, or one made before it was measured)."""
        return float(self.calibration.get("engine_firing_s", default))

    def border_cost(self, element: "str | ProcessingElement") -> tuple[float, float]:
        """(a, b): a firing on `element` pays a + b * (its input + output bytes) beyond its
        layers' profiled time (measure.border_cost); (0, 0) where none was measured."""
        fit = self.calibration.get("border_s", {}).get(_name(element), {})
        return float(fit.get("a", 0.0)), float(fit.get("b", 0.0))

    def _kind(self, element: "str | ProcessingElement") -> str:
        if not isinstance(element, str):
            return element.kind
        info = self.elements.get(element)
        if info is None:
            raise InputError(f"{self.source or 'the profile'} knows no element {element!r}")
        return info["kind"]

    def link(self, src_kind: str, dst_kind: str) -> dict[str, float]:
        """The fitted model of a link between element kinds (an accelerator is reached like a
        GPU unless the profile has its own 'cpu->accel' entries, as Kang et al. assume)."""
        key = f"{src_kind}->{dst_kind}"
        if key not in self.comm:
            key = key.replace("accel", "gpu")
        if key not in self.comm:
            raise InputError(f"{self.source or 'the profile'} has no communication model for "
                             f"{src_kind}->{dst_kind} "
                             f"(it has {', '.join(sorted(self.comm)) or 'none'})")
        return self.comm[key]

    def transfer_time(self, nbytes: int, src_element: "str | ProcessingElement",
                      dst_element: "str | ProcessingElement") -> float:
        """Seconds to hand `nbytes` from one element to another: a + b*bytes; 0 on one element."""
        if _name(src_element) == _name(dst_element) or nbytes <= 0:
            return 0.0
        m = self.link(self._kind(src_element), self._kind(dst_element))
        return float(m["a"] + m["b"] * nbytes)

    def layer_sum_vs_whole(self) -> dict[str, dict[str, float]]:
        """Per element with a whole-model time: sum of layer medians, whole-model median, ratio."""
        out = {}
        for e, st in self.whole_model.items():
            s = sum(v["median"] for v in self.layer_times.get(e, {}).values())
            out[e] = {"layer_sum": s, "whole": st["median"],
                      "ratio": s / st["median"] if st["median"] else float("nan")}
        return out

    # ---- staleness ----
    def check_matches(self, graph: "CnnGraph", platform: "Platform | None" = None,
                      layers: bool = True) -> None:
        """InputError unless this profile was made for `graph` (and `platform`) and, with
        `layers`, has a time for every layer of `graph` (fused and unfused layers differ)."""
        where = f"profile {self.source}" if self.source else "the profile"
        if self.model_hash != graph.model_hash:
            raise InputError(f"{where} was made for model {self.model_name} (hash "
                             f"{_short(self.model_hash)}), not {graph.name} (hash "
                             f"{_short(graph.model_hash)}); profile again")
        if platform is not None and self.platform_hash != platform.platform_hash:
            raise InputError(f"{where} was made for platform {self.platform_name} (hash "
                             f"{_short(self.platform_hash)}), not {platform.name} (hash "
                             f"{_short(platform.platform_hash)}); profile again")
        if not layers:
            return
        have = {l for times in self.layer_times.values() for l in times}
        missing = [l.name for l in graph.layers if l.name not in have]
        if missing:
            hint = ("; it was made with fused layers: load the model with fuse=True"
                    if self.meta.get("fused") else
                    "; it was made without fused layers: load the model with fuse=False"
                    if self.meta.get("fused") is False else "")
            raise InputError(f"{where} has no time for layer {missing[0]!r} of {graph.name} "
                             f"({len(missing)} layers missing){hint}")

    # ---- JSON ----
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("source")
        return d

    @staticmethod
    def from_dict(d: Any, source: str = "") -> "Profile":

        from hetflow.profile.profile_schema import ProfileFile

        f = validate(ProfileFile, d, source or "profile", "hetflow profile")
        return Profile(**f.model_dump(), source=source)

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically (a reader never sees half a file)."""
        path = Path(path)
        data = json.dumps(self.to_dict(), indent=1, sort_keys=False, allow_nan=False)
        try:
            atomic_write_text(path, data)
        except OSError as e:
            raise InputError(f"{path}: cannot write the profile: {e.strerror or e}") from None
        self.source = str(path)
        return path

    @staticmethod
    def load(path: str | os.PathLike) -> "Profile":
        path = Path(path)
        try:
            d = json.loads(path.read_text())
        except OSError as e:
            raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: not a hetflow profile "
                             f"(bad JSON at line {e.lineno})") from None
        return Profile.from_dict(d, str(path))

    @staticmethod
    def load_whole(path: str | os.PathLike) -> "Profile":
        """`load`, refusing a profile that a signal cut short (its meta says interrupted): a
        plan searched on it would see only the elements measured before the stop."""
        prof = Profile.load(path)
        if prof.meta.get("interrupted"):
            raise InputError(f"{path}: the profile was interrupted "
                             f"({prof.meta['interrupted']}) and is partial; profile again")
        return prof
