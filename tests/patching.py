"""Replacing a function for a test wherever hetflow looks it up. Modules import names at their
top (`from hetflow.runtime.api import run_plan`), so a function replaced only in the module that
defines it would still be called, unreplaced, through every module that imported it."""
from __future__ import annotations

import importlib
import sys
from types import ModuleType


_MISSING = object()


def patch_everywhere(monkeypatch, module: ModuleType | str, name, value=_MISSING) -> None:
    """`monkeypatch.setattr(module, name, value)` (or, as monkeypatch takes it,
    `("package.module.name", value)`), and the same in every loaded hetflow module that holds
    the original object under that name."""
    if value is _MISSING:
        module, name, value = *str(module).rsplit(".", 1), name
    if isinstance(module, str):
        module = importlib.import_module(module)
    original = getattr(module, name)
    monkeypatch.setattr(module, name, value)
    for other in list(sys.modules.values()):
        if (other is not module and getattr(other, "__name__", "").startswith("hetflow")
                and getattr(other, name, None) is original):
            monkeypatch.setattr(other, name, value)
