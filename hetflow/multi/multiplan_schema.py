"""The multi-plan file's schema, checked on load before the MultiPlan is built (pydantic is
imported only here, when a file is read)."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from hetflow.plan.schema import PlanFile
from hetflow.schema import FileModel, exact_version

from hetflow.multi.multiplan import MULTIPLAN_VERSION


class AppEntryFile(FileModel):
    name: str
    # 0: free-running (a frame whenever the engine has room; no deadline)
    period_s: float = Field(ge=0)
    deadline_s: float | None = Field(default=None, gt=0)  # absent: the period
    priority: int  # lower number = higher priority
    streams: int = Field(default=1, ge=1)  # streams of the model at this period
    predicted: dict[str, Any] = {}
    plan: PlanFile


class MultiPlanFile(FileModel):
    version: exact_version(MULTIPLAN_VERSION)  # type: ignore[valid-type]
    kind: Literal["hetflow-multiplan"]
    platform_name: str
    # derived from `apps` when written; read back only to be ignored
    shared_elements: dict[str, list[str]] = {}
    priorities: dict[str, int] = {}
    predicted: dict[str, Any] = {}
    search: dict[str, Any] = {}
    # a GPU's lanes: shared by its applications, or each application's own (absent: shared)
    gpu_lanes: Literal["shared", "own"] = "shared"
    apps: list[AppEntryFile]
