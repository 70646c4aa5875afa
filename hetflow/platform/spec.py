"""What a machine offers: CPU clusters, GPUs, accelerators, and the processing elements (PEs) built
from them.

Plain frozen dataclasses, no pydantic: the GPU machines that run `hetflow run` lack pydantic and
the runtime imports this module, so the YAML check (`hetflow.platform.load`) is a small explicit
validator instead.

A *processing element* is what one pipeline stage runs on: a group of CPU cores of one cluster,
a GPU together with the CPU core that drives it, or an accelerator. The `peak_gflops`/`mem_gbps`
figures are nominal estimates, used only by `estimate_profile` for machines that are not at hand.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from hetflow.errors import InputError
from hetflow.platform.precision import DEFAULT_PRECISION, precision_problem, split_element_name

if TYPE_CHECKING:
    from hetflow.platform.configs import PeConfig

PE_KINDS = ("cpu", "gpu", "accel")


def format_cores(cores: Iterable[int]) -> str:
    """(0,1,2,3) -> '0-3', (0,3,4,5) -> '0,3-5', (2,) -> '2'."""
    cs = sorted(cores)
    runs: list[list[int]] = []
    for c in cs:
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


def cpu_element_name(cores: Iterable[int]) -> str:
    """Stable readable name of a CPU core group: 'cpu0-3', 'cpu2', 'cpu0,3-5'."""
    return "cpu" + format_cores(cores)


@dataclass(frozen=True)
class ProcessingElement:
    """Where one pipeline stage runs.

    `cores`: the CPU cores it occupies (for a GPU or accelerator: the core that drives it, if any).
    `speed_factor`/`relative_to`: for an accelerator hetflow cannot run, its time is estimated as
    the time on the element `relative_to` (a cluster used as one element) divided by the factor.
    `backend`: None = the default backend for the kind; "none" = no backend (estimate only).
    `precision`: the number format its layers run in ('fp32', 'fp16', 'int8', ...; see
    `hetflow.platform.precision`); a name such as 'gpu0@fp16' shows any other than fp32.
    """

    name: str
    kind: str
    cores: tuple[int, ...]
    cluster: str | None = None
    device_index: int | None = None
    freq_mhz: float | None = None
    power_w: float | None = None
    speed_factor: float | None = None
    relative_to: str | None = None
    peak_gflops: float | None = None
    mem_gbps: float | None = None
    backend: str | None = None
    model: str | None = None  # core type or device name, for people
    resources: dict[str, float] = field(default_factory=dict, compare=False, hash=False)
    precision: str = DEFAULT_PRECISION

    def __post_init__(self) -> None:
        problem = precision_problem(self.kind, self.precision)
        if problem:
            raise InputError(f"element {self.name!r}: precision: {problem}")

    @property
    def equivalence_key(self) -> tuple:
        """Elements with equal keys run a layer equally fast: profile one, copy to the others."""
        if self.kind == "cpu":
            return ("cpu", self.cluster, len(self.cores), self.precision)
        # a GPU's host cores stage its batches (backends.staging): part of its rate
        return (self.kind, self.model or self.base_name, self.precision, len(self.cores))

    @property
    def base_name(self) -> str:
        """The name without its precision: 'gpu0@fp16' -> 'gpu0' (the device it runs on)."""
        return split_element_name(self.name)[0]

    @property
    def driver_core(self) -> int | None:
        return self.cores[0] if self.kind != "cpu" and self.cores else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cores"] = list(self.cores)
        return {k: v for k, v in d.items() if v not in (None, {})
                and not (k == "precision" and v == DEFAULT_PRECISION)}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "ProcessingElement":
        d = dict(d)
        d["cores"] = tuple(d.get("cores", ()))
        return ProcessingElement(**d)


@dataclass(frozen=True)
class CpuCluster:
    """Cores of one kind sharing a clock (a big.LITTLE cluster, or all cores of a server)."""

    name: str
    cores: tuple[int, ...]
    core_type: str | None = None
    max_freq_mhz: float | None = None
    power_w_per_core: float | None = None
    peak_gflops_per_core: float | None = None  # nominal estimate
    mem_gbps: float | None = None  # memory bandwidth the whole cluster can draw (estimate)
    precision: str = DEFAULT_PRECISION  # of every CPU element made of its cores


@dataclass(frozen=True)
class Gpu:
    """A CUDA device. `driver_core` runs the thread that launches its work; `staging_cores`
    run threads that help it copy a batch's frames into pinned host memory
    (`backends.staging`). Neither is ever part of a CPU element."""

    index: int
    name: str
    driver_core: int
    staging_cores: tuple[int, ...] = ()
    freq_mhz: float | None = None
    power_w: float | None = None
    peak_gflops: float | None = None
    mem_gbps: float | None = None
    backend: str | None = None
    precision: str = DEFAULT_PRECISION

    @property
    def element_name(self) -> str:
        """The device's name ('gpu0'); its element adds any precision but fp32 ('gpu0@fp16')."""
        return f"gpu{self.index}"


@dataclass(frozen=True)
class Accelerator:
    """An NPU, DSP or FPGA. Without a backend it is only usable through estimated profiles."""

    name: str
    driver_core: int | None = None
    model: str | None = None
    freq_mhz: float | None = None
    power_w: float | None = None
    peak_gflops: float | None = None
    mem_gbps: float | None = None
    speed_factor: float | None = None
    relative_to: str | None = None
    backend: str | None = "none"
    resources: dict[str, float] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Platform:
    name: str
    clusters: tuple[CpuCluster, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    accelerators: tuple[Accelerator, ...] = ()
    # nominal link models {"cpu->gpu": {"a": s, "b": s_per_byte}} for estimated profiles
    comm: dict[str, dict[str, float]] = field(default_factory=dict, compare=False, hash=False)
    description: str = ""
    source: str = ""  # file it was read from, for messages

    # ---- cores ----
    @property
    def cores(self) -> tuple[int, ...]:
        return tuple(sorted(c for cl in self.clusters for c in cl.cores))

    @property
    def driver_cores(self) -> frozenset[int]:
        """Cores that drive a GPU or accelerator or stage its frames; they are never part of a
        CPU element."""
        ds = [g.driver_core for g in self.gpus] + [a.driver_core for a in self.accelerators]
        ds += [c for g in self.gpus for c in g.staging_cores]
        return frozenset(d for d in ds if d is not None)

    def free_cores(self, cluster: CpuCluster) -> tuple[int, ...]:
        """The cores of `cluster` left for CPU elements (driving cores removed)."""
        return tuple(c for c in cluster.cores if c not in self.driver_cores)

    def cluster(self, name: str) -> CpuCluster:
        for cl in self.clusters:
            if cl.name == name:
                return cl
        raise KeyError(name)

    def cluster_of(self, core: int) -> CpuCluster | None:
        for cl in self.clusters:
            if core in cl.cores:
                return cl
        return None

    # ---- elements ----
    def elements(self, config: "PeConfig | Mapping[str, Iterable[int]] | str | None" = None
                 ) -> list[ProcessingElement]:
        """The PEs of one configuration (see `hetflow.platform.configs`).

        `config` None: each cluster as one element (what an OS-level thread pool gives),
        plus every GPU and accelerator. Otherwise a `PeConfig`, a label such as
        'big:3+1 little:1+1', or a mapping cluster -> part sizes.
        """
        from hetflow.platform.configs import resolve_config

        return list(resolve_config(self, config).elements)

    def all_elements(self) -> list[ProcessingElement]:
        """Every PE that appears in some configuration (what a full profile covers)."""
        from hetflow.platform.configs import all_elements

        return all_elements(self)

    # ---- identity ----
    def to_dict(self) -> dict[str, Any]:
        def clean(obj: Any) -> dict[str, Any]:
            d = asdict(obj)
            for key in ("cores", "staging_cores"):
                if key in d:
                    d[key] = list(d[key]) or None  # none: left out, the hash as before
            # fp32 is left out: a platform hashes as it did before precisions existed
            return {k: v for k, v in d.items() if v not in (None, {}) and not (
                k == "backend" and v == "none" and isinstance(obj, Accelerator)) and not (
                k == "precision" and v == DEFAULT_PRECISION)}

        d: dict[str, Any] = {"name": self.name}
        if self.description:
            d["description"] = self.description
        d["clusters"] = [clean(c) for c in self.clusters]
        if self.gpus:
            d["gpus"] = [clean(g) for g in self.gpus]
        if self.accelerators:
            d["accelerators"] = [clean(a) for a in self.accelerators]
        if self.comm:
            d["comm"] = {k: dict(v) for k, v in self.comm.items()}
        return d

    @property
    def platform_hash(self) -> str:
        """sha256 of the structure (cores, clusters, devices, nominal rates), not of the name or
        description: renaming a YAML file does not make its profiles stale."""
        d = self.to_dict()
        d.pop("name", None)
        d.pop("description", None)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()

    def check_devices(self) -> None:
        """Raise InputError unless every core and GPU named here exists on this machine.

        Done by the measuring profiler and the runtime, not at load time: a YAML of another
        board is fine for `show`, `configs` and estimated profiles.
        """
        from hetflow.platform.detect import check_devices_present

        check_devices_present(self)
