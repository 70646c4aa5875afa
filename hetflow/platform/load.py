"""Read and write platform YAML files, with a strict validator.

Every error is one line naming the file and the setting, e.g.
`platform.yaml: clusters[1].cores: core 3 is also in cluster 'big'`.
The validator is hand-written (no pydantic) so that the runtime import path stays light.
"""
from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping

from hetflow.errors import InputError
from hetflow.platform.precision import DEFAULT_PRECISION, SEPARATOR, precision_problem
from hetflow.platform.spec import Accelerator, CpuCluster, Gpu, Platform
import yaml

COMM_KEYS = ("cpu->cpu", "cpu->gpu", "gpu->cpu", "gpu->gpu", "cpu->accel", "accel->cpu")


class _Checker:
    """Validates one YAML document; `fail` raises the one-line InputError."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, msg: str) -> None:
        raise InputError(f"{self.source}: {where}: {msg}" if where else f"{self.source}: {msg}")

    def mapping(self, obj: Any, where: str, known: Mapping[str, bool]) -> dict[str, Any]:
        """`known`: key -> required."""
        if not isinstance(obj, Mapping):
            self.fail(where or "top level", f"expected a mapping, got {type(obj).__name__}")
        for k in obj:
            if k not in known:
                self.fail(_join(where, str(k)), f"unknown key (known: {', '.join(known)})")
        for k, required in known.items():
            if required and obj.get(k) is None:
                self.fail(_join(where, k), "missing")
        return dict(obj)

    def string(self, v: Any, where: str) -> str:
        if not isinstance(v, str) or not v.strip():
            self.fail(where, f"expected a non-empty string, got {v!r}")
        return v

    def integer(self, v: Any, where: str, minimum: int = 0) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            self.fail(where, f"expected an integer >= {minimum}, got {v!r}")
        return v

    def positive(self, v: Any, where: str) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            self.fail(where, f"expected a positive number, got {v!r}")
        return float(v)

    def nonneg(self, v: Any, where: str) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            self.fail(where, f"expected a number >= 0, got {v!r}")
        return float(v)

    def cores(self, v: Any, where: str) -> tuple[int, ...]:
        """A list of core ids, or a string such as '0-3,6'."""
        if isinstance(v, str):
            out: list[int] = []
            for part in v.split(","):
                m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
                if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
                    self.fail(where, f"bad core range {part.strip()!r} (write e.g. '0-3,6')")
                lo = int(m.group(1))
                out.extend(range(lo, int(m.group(2) or lo) + 1))
        elif isinstance(v, list):
            out = [self.integer(c, f"{where}[{i}]") for i, c in enumerate(v)]
        else:
            self.fail(where, f"expected a list of core ids or a range like '0-3', got {v!r}")
        if not out:
            self.fail(where, "no cores")
        seen: set[int] = set()
        for c in out:
            if c in seen:
                self.fail(where, f"core {c} listed twice")
            seen.add(c)
        return tuple(out)

    def precision(self, v: Any, where: str, kind: str) -> str:
        problem = precision_problem(kind, v)
        if problem:
            self.fail(where, problem)
        return v


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _opt(d: Mapping[str, Any], key: str, conv: Callable[[Any, str], Any], where: str) -> Any:
    v = d.get(key)
    return None if v is None else conv(v, _join(where, key))


_TOP = {"name": True, "description": False, "clusters": False, "gpus": False,
        "accelerators": False, "comm": False}
_CLUSTER = {"name": True, "cores": True, "core_type": False, "max_freq_mhz": False,
            "power_w_per_core": False, "peak_gflops_per_core": False, "mem_gbps": False,
            "precision": False}
_GPU = {"index": True, "name": True, "driver_core": False, "staging_cores": False,
        "freq_mhz": False, "power_w": False,
        "peak_gflops": False, "mem_gbps": False, "backend": False, "precision": False}
_ACCEL = {"name": True, "driver_core": False, "model": False, "freq_mhz": False,
          "power_w": False, "peak_gflops": False, "mem_gbps": False, "speed_factor": False,
          "relative_to": False, "backend": False, "resources": False}
_LINK = {"a": True, "b": True}


def platform_from_dict(doc: Any, source: str = "<platform>") -> Platform:
    """Validate a parsed YAML document and build the Platform."""
    ck = _Checker(source)
    top = ck.mapping(doc, "", _TOP)
    name = ck.string(top["name"], "name")
    description = top.get("description") or ""
    if not isinstance(description, str):
        ck.fail("description", "expected a string")

    clusters = _clusters(ck, top.get("clusters") or [])
    core_owner = {c: cl.name for cl in clusters for c in cl.cores}
    drivers: dict[int, str] = {}  # core -> device it drives

    def driver(v: Any, where: str, device: str) -> int:
        core = ck.integer(v, where)
        if core not in core_owner:
            ck.fail(where, f"core {core} is in no cluster")
        if core in drivers:
            ck.fail(where, f"core {core} already drives or stages for {drivers[core]}")
        drivers[core] = device
        return core

    gpus = []
    raw_gpus = top.get("gpus") or []
    if not isinstance(raw_gpus, list):
        ck.fail("gpus", "expected a list")
    for i, g in enumerate(raw_gpus):
        w = f"gpus[{i}]"
        g = ck.mapping(g, w, _GPU)
        index = ck.integer(g["index"], f"{w}.index")
        if any(x.index == index for x in gpus):
            ck.fail(f"{w}.index", f"GPU index {index} listed twice")
        staging = g.get("staging_cores")
        staging = () if staging is None else ck.cores(staging, f"{w}.staging_cores")
        if g.get("driver_core") is None:
            free = [c for c in sorted(core_owner) if c not in drivers and c not in staging]
            if not free:
                ck.fail(f"{w}.driver_core", "missing, and no free core is left to drive the GPU")
            g["driver_core"] = free[-1]  # convention: the last free core drives the GPU
        driving = driver(g["driver_core"], f"{w}.driver_core", f"gpu{index}")
        for core in staging:
            driver(core, f"{w}.staging_cores", f"gpu{index}")
        gpus.append(Gpu(
            index=index, name=ck.string(g["name"], f"{w}.name"), driver_core=driving,
            staging_cores=staging,
            freq_mhz=_opt(g, "freq_mhz", ck.positive, w), power_w=_opt(g, "power_w", ck.nonneg, w),
            peak_gflops=_opt(g, "peak_gflops", ck.positive, w),
            mem_gbps=_opt(g, "mem_gbps", ck.positive, w),
            backend=_opt(g, "backend", ck.string, w),
            precision=ck.precision(g.get("precision", DEFAULT_PRECISION), f"{w}.precision",
                                   "gpu")))

    accels = []
    raw_acc = top.get("accelerators") or []
    if not isinstance(raw_acc, list):
        ck.fail("accelerators", "expected a list")
    for i, a in enumerate(raw_acc):
        w = f"accelerators[{i}]"
        a = ck.mapping(a, w, _ACCEL)
        aname = ck.string(a["name"], f"{w}.name")
        if re.fullmatch(r"(cpu[\d,\-]+|gpu\d+)", aname):
            ck.fail(f"{w}.name", f"{aname!r} looks like a CPU or GPU element name; choose another")
        if SEPARATOR in aname:
            ck.fail(f"{w}.name", f"{aname!r}: '{SEPARATOR}' marks an element's precision")
        if any(x.name == aname for x in accels):
            ck.fail(f"{w}.name", f"accelerator {aname!r} listed twice")
        rel = _opt(a, "relative_to", ck.string, w)
        sf = _opt(a, "speed_factor", ck.positive, w)
        if (rel is None) != (sf is None):
            ck.fail(f"{w}.speed_factor" if sf is None else f"{w}.relative_to",
                    "speed_factor and relative_to go together")
        if rel is not None and rel not in {c.name for c in clusters}:
            ck.fail(f"{w}.relative_to", f"no cluster named {rel!r}")
        res = a.get("resources") or {}
        if not isinstance(res, Mapping):
            ck.fail(f"{w}.resources", "expected a mapping name -> amount")
        res = {str(k): ck.nonneg(v, f"{w}.resources.{k}") for k, v in res.items()}
        accels.append(Accelerator(
            name=aname,
            driver_core=None if a.get("driver_core") is None
            else driver(a["driver_core"], f"{w}.driver_core", aname),
            model=_opt(a, "model", ck.string, w), freq_mhz=_opt(a, "freq_mhz", ck.positive, w),
            power_w=_opt(a, "power_w", ck.nonneg, w),
            peak_gflops=_opt(a, "peak_gflops", ck.positive, w),
            mem_gbps=_opt(a, "mem_gbps", ck.positive, w), speed_factor=sf, relative_to=rel,
            backend=_opt(a, "backend", ck.string, w) or "none", resources=res))

    comm = {}
    raw_comm = top.get("comm") or {}
    if not isinstance(raw_comm, Mapping):
        ck.fail("comm", "expected a mapping such as {'cpu->gpu': {a: 2e-5, b: 1e-10}}")
    for k, v in raw_comm.items():
        if k not in COMM_KEYS:
            ck.fail(f"comm.{k}", f"unknown link (known: {', '.join(COMM_KEYS)})")
        v = ck.mapping(v, f"comm.{k}", _LINK)
        comm[k] = {"a": ck.nonneg(v["a"], f"comm.{k}.a"), "b": ck.nonneg(v["b"], f"comm.{k}.b")}

    if not clusters and not gpus and not accels:
        ck.fail("", "no clusters, gpus or accelerators: nothing to run on")
    return Platform(name=name, clusters=tuple(clusters), gpus=tuple(gpus),
                    accelerators=tuple(accels), comm=comm, description=description.strip(),
                    source=source)


def _clusters(ck: _Checker, raw: Any) -> list[CpuCluster]:
    if not isinstance(raw, list):
        ck.fail("clusters", "expected a list")
    out: list[CpuCluster] = []
    for i, c in enumerate(raw):
        w = f"clusters[{i}]"
        c = ck.mapping(c, w, _CLUSTER)
        cname = ck.string(c["name"], f"{w}.name")
        if any(x.name == cname for x in out):
            ck.fail(f"{w}.name", f"cluster {cname!r} listed twice")
        cores = ck.cores(c["cores"], f"{w}.cores")
        for other in out:
            for core in cores:
                if core in other.cores:
                    ck.fail(f"{w}.cores", f"core {core} is also in cluster {other.name!r}")
        out.append(CpuCluster(
            name=cname, cores=cores, core_type=_opt(c, "core_type", ck.string, w),
            max_freq_mhz=_opt(c, "max_freq_mhz", ck.positive, w),
            power_w_per_core=_opt(c, "power_w_per_core", ck.nonneg, w),
            peak_gflops_per_core=_opt(c, "peak_gflops_per_core", ck.positive, w),
            mem_gbps=_opt(c, "mem_gbps", ck.positive, w),
            precision=ck.precision(c.get("precision", DEFAULT_PRECISION), f"{w}.precision",
                                   "cpu")))
    return out


# ---------------------------------------------------------------------------------------------
def bundled_platforms() -> list[str]:
    """Names of the platform descriptions shipped with hetflow."""
    folder = resources.files("hetflow.platform") / "bundled"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_platform(path_or_name: str | os.PathLike, check_devices: bool = False) -> Platform:
    """Read a platform YAML file, or a bundled description by name ('jetson_tx2').

    `check_devices`: also check that every core and GPU exists on this machine (needed to
    measure or run; not to look at a description or to estimate).
    """

    p = Path(path_or_name)
    if p.is_file():
        source, text = str(path_or_name), None
    else:
        name = str(path_or_name)
        if name not in bundled_platforms():
            raise InputError(f"{name}: no such platform file or bundled platform "
                             f"(bundled: {', '.join(bundled_platforms())})")
        source = f"{name}.yaml"
        text = (resources.files("hetflow.platform") / "bundled" / source).read_text()
    try:
        text = p.read_text() if text is None else text
    except OSError as e:
        raise InputError(f"{source}: cannot read: {e.strerror}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}: " if mark is not None else ""
        raise InputError(f"{source}: {at}not valid YAML ({getattr(e, 'problem', e)})") from None
    platform = platform_from_dict(doc, source)
    if check_devices:
        platform.check_devices()
    return platform


def resolve_platform(arg: str | os.PathLike | None, check_devices: bool = False) -> Platform:
    """'auto' (or None) -> detect this machine; a file path; or a bundled name."""
    if arg is None or str(arg) == "auto":
        from hetflow.platform.detect import detect_platform

        return detect_platform()
    return load_platform(arg, check_devices=check_devices)


def dump_platform(platform: Platform) -> str:
    """YAML text that `load_platform` reads back to an equal Platform."""

    return yaml.safe_dump(platform.to_dict(), sort_keys=False, default_flow_style=None)
