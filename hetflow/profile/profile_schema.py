"""The profile file's schema, checked on load before the Profile is built (pydantic is imported
only here, when a file is read)."""
from __future__ import annotations

from typing import Any, Literal

import re

from pydantic import ConfigDict, field_validator

from hetflow.schema import FileModel, exact_version

from hetflow.profile.profile import PROFILE_VERSION


class StatsFile(FileModel):
    """A time's statistics: the median is what the cost model reads; p10/p90/max/n and others
    are kept as written."""

    model_config = ConfigDict(extra="allow")
    median: float


class ElementInfoFile(FileModel):
    model_config = ConfigDict(extra="allow")  # cores, cluster, profiled_as, ...
    kind: Literal["cpu", "gpu", "accel"]


class LinkFile(FileModel):
    """A fitted link: seconds = a + b * bytes (and whatever the fit adds, e.g. r2)."""

    model_config = ConfigDict(extra="allow")
    a: float
    b: float


class BatchEntryFile(FileModel):
    """One (b, k) of a batch table: seconds a firing of b frames on one of k lanes."""

    model_config = ConfigDict(extra="allow")  # alone_fps, busy_fps, host, ...
    alone: StatsFile
    busy: StatsFile | None = None
    memory_bytes: int | None = None


_BATCH_KEY = re.compile(r"[1-9]\d*,[1-9]\d*")


class ProfileFile(FileModel):
    version: exact_version(PROFILE_VERSION)  # type: ignore[valid-type]
    model_name: str
    model_hash: str
    platform_name: str
    platform_hash: str
    estimated: bool = False
    elements: dict[str, ElementInfoFile] = {}
    layer_times: dict[str, dict[str, StatsFile]]
    subnet_times: dict[str, dict[str, StatsFile]] = {}
    whole_model: dict[str, StatsFile] = {}
    gpu_lanes: dict[str, dict[str, Any]] = {}
    stage_lanes: dict[str, dict[str, dict[str, Any]]] = {}
    gpu_batches: dict[str, dict[str, Any]] = {}  # absent from profiles made before batches
    comm: dict[str, LinkFile] = {}
    comm_raw: dict[str, list[list[float]]] = {}
    cpu_freq_mhz: dict[str, float | None] = {}
    power: dict[str, Any] = {}  # absent from profiles made before power was measured
    calibration: dict[str, Any] = {}
    meta: dict[str, Any] = {}

    @field_validator("gpu_batches")
    @classmethod
    def _batch_tables(cls, tables: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Each "b,k" entry as BatchEntryFile says ("skipped" and "seconds" kept as written)."""
        for element, table in tables.items():
            for key, entry in table.items():
                if key in ("skipped", "seconds"):
                    continue
                if not _BATCH_KEY.fullmatch(key):
                    raise ValueError(f"gpu_batches[{element!r}]: key {key!r} is not 'b,k'")
                BatchEntryFile.model_validate(entry)
        return tables
