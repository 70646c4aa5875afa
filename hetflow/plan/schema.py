"""The plan file's schema, checked on load before the dataclasses are built (pydantic is
imported only here, when a file is read)."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from hetflow.platform.precision import DEFAULT_PRECISION, PRECISIONS
from hetflow.schema import FileModel

from hetflow.plan.plan import PLAN_VERSIONS


def _known_version(v: int) -> int:
    if v not in PLAN_VERSIONS:
        raise ValueError(f"expected {' or '.join(map(str, PLAN_VERSIONS))}")
    return v


class ElementFile(FileModel):
    name: str
    kind: Literal["cpu", "gpu", "accel"]
    cores: list[int] = []
    cluster: str | None = None
    device_index: int | None = None
    freq_mhz: float | None = None
    power_w: float | None = None
    speed_factor: float | None = None
    relative_to: str | None = None
    peak_gflops: float | None = None
    mem_gbps: float | None = None
    backend: str | None = None
    model: str | None = None
    resources: dict[str, float] = {}
    # the number format the element computes in; plans written before precisions are fp32
    precision: Literal[PRECISIONS] = DEFAULT_PRECISION  # type: ignore[valid-type]


class MappingFile(FileModel):
    assignment: dict[str, str]  # layer -> actor
    policy: Literal["paper", "maximal"] = "maximal"  # Algorithm 2's phase rules
    meta: dict[str, Any] = {}
    dispatch: dict[str, list[int]] = {}
    # how the runtime hands frames to a group's members
    dispatch_mode: Literal["dynamic", "static"] = "dynamic"
    lanes: dict[str, Annotated[int, Field(ge=1)]] = {}  # GPU element -> frames in flight
    # actor -> frame offset per phase (Mapping.interleave)
    interleave: dict[str, list[Annotated[int, Field(ge=0)]]] = {}
    round_frames: int = Field(1, ge=1, le=64)  # frames per round of the interleaved actors
    # element -> frames a firing takes, and seconds a partial batch waits (Mapping.batch);
    # their bounds are checked with a line naming the element (plan.check_plan_batch)
    batch: dict[str, int] = {}
    batch_wait: dict[str, float] = {}


class PhaseFile(FileModel):
    actor: str
    index: int = Field(ge=0)
    layers: list[str]
    inputs: list[str]
    outputs: list[str]


class ChannelFile(FileModel):
    name: str
    tensor: str
    src: str
    src_phase: int = Field(ge=0)
    dst: str
    dst_phase: int = Field(ge=0)
    tokens: int = Field(ge=0)
    nbytes: int = Field(ge=0)


class AppFile(FileModel):
    model_name: str
    model_hash: str
    assignment: dict[str, str]
    phases: dict[str, list[PhaseFile]]
    channels: list[ChannelFile]
    model_inputs: dict[str, list[str]]
    model_outputs: dict[str, str]


class SplitFile(FileModel):
    """A layer split: part sizes under the key of their axis, "channels" or "rows" (exactly
    one; LayerSplit.from_dict says so where neither or both is given)."""
    layer: str
    channels: list[Annotated[int, Field(ge=1)]] | None = Field(None, min_length=2)
    rows: list[Annotated[int, Field(ge=1)]] | None = Field(None, min_length=2)


class PlanFile(FileModel):
    # an older version loads as it was written: version 1 plans have no batches (b = 1)
    version: Annotated[int, AfterValidator(_known_version)]
    model_name: str
    model_hash: str
    model_source: str = ""
    platform_name: str
    strategy: str
    search: dict[str, Any] = {}
    fuse: bool = False
    input_shapes: dict[str, list[int]] = {}
    capacity_frames: int = Field(ge=1)
    predicted: dict[str, Any]
    elements: dict[str, ElementFile]
    mapping: MappingFile
    app: AppFile
    splits: list[SplitFile] = []
