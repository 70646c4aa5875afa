"""Backend registry: a name maps to one Backend class; registering a name twice is an error.

Built-in backends are imported on first use, so `import hetflow.backends` pulls in neither
onnxruntime nor torch.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from hetflow.errors import BackendError

if TYPE_CHECKING:
    from hetflow.backends.base import Backend
    from hetflow.platform.spec import ProcessingElement

_REGISTRY: dict[str, type["Backend"]] = {}
_BUILTIN = {"ort_cpu": "hetflow.backends.ort_cpu", "torch_cuda": "hetflow.backends.torch_cuda"}
DEFAULT_FOR_KIND = {"cpu": "ort_cpu", "gpu": "torch_cuda"}


def register_backend(name: str, cls: type["Backend"]) -> None:
    if name in _REGISTRY:
        raise ValueError(f"backend {name!r} is already registered (by {_REGISTRY[name].__module__}."
                         f"{_REGISTRY[name].__qualname__})")
    _REGISTRY[name] = cls


def registered_backends() -> list[str]:
    return sorted(set(_REGISTRY) | set(_BUILTIN))


def get_backend(kind_or_name: str) -> "Backend":
    """A backend instance by name ('ort_cpu') or by element kind ('cpu' -> its default)."""
    name = DEFAULT_FOR_KIND.get(kind_or_name, kind_or_name)
    if name not in _REGISTRY and name in _BUILTIN:
        try:
            importlib.import_module(_BUILTIN[name])
        except ImportError as e:
            raise BackendError(f"backend {name!r} cannot be loaded: {e}") from None
    if name not in _REGISTRY:
        raise BackendError(f"no backend {kind_or_name!r} "
                           f"(known: {', '.join(registered_backends())})")
    return _REGISTRY[name]()


def backend_for(element: "ProcessingElement") -> "Backend":
    """The backend that runs on `element` (its own choice, else the default for its kind)."""
    if element.backend == "none":
        raise BackendError(f"element {element.name!r} ({element.model or element.kind}) has no "
                           "hetflow backend; profile it with an estimate (--estimate)")
    name = element.backend or DEFAULT_FOR_KIND.get(element.kind)
    if name is None:
        raise BackendError(f"element {element.name!r}: no default backend for kind "
                           f"{element.kind!r}")
    backend = get_backend(name)
    if element.kind not in backend.kinds:
        raise BackendError(f"backend {name!r} runs on {', '.join(backend.kinds)} elements, "
                           f"not on {element.name!r} ({element.kind})")
    return backend
