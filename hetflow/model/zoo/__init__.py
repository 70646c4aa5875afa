"""hetflow's model zoo: real CNN architectures generated as ONNX, nothing downloaded.

Each model has the layers and tensor shapes of its torchvision / ONNX model zoo version (opset 17,
float32, batch 1, static shapes) and deterministic random weights (seeded by the model name), so
it is good for profiling, mapping and running, not for accurate predictions.

    >>> from hetflow.model import zoo
    >>> path = zoo.cached_model_path("resnet18")   # built once, then reused
"""
from __future__ import annotations

from pathlib import Path

import onnx

from hetflow.errors import InputError
from hetflow.io import atomic_write_bytes, cache_root

from hetflow.model.zoo.builder import GraphBuilder, parameter_count
from hetflow.model.zoo.catalog import ALIASES, CATALOG, ZOO_VERSION, ZooEntry

__all__ = ["ZooEntry", "ZOO_VERSION", "list_models", "get_entry", "build_model", "export_model",
           "cached_model_path", "parameter_count", "cache_dir"]


def list_models() -> list[ZooEntry]:
    """Every model of the zoo, in a fixed order."""
    return [entry for entry, _ in CATALOG.values()]


def _canonical(name: str) -> str:
    key = name.strip().lower().replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in CATALOG:
        known = ", ".join(sorted([*CATALOG, *ALIASES]))
        raise InputError(f"unknown zoo model {name!r}; known models: {known}")
    return key


def get_entry(name: str) -> ZooEntry:
    """The entry of a model, by name or alias; unknown names raise InputError."""
    return CATALOG[_canonical(name)][0]


def build_model(name: str) -> onnx.ModelProto:
    """Build the model; the same name always gives the same serialised bytes."""
    entry, build_fn = CATALOG[_canonical(name)]
    builder = GraphBuilder(entry.name, entry.input_shape)
    output = build_fn(builder, builder.input)
    assert output.shape == entry.output_shape, (entry.name, output.shape)
    return builder.build(output, entry.description, ZOO_VERSION)


def export_model(name: str, path: str | Path) -> Path:
    """Build the model and write it to `path` atomically (no reader ever sees half a file)."""
    data = build_model(name).SerializeToString()
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, data)
    except OSError as e:
        raise InputError(f"cannot write zoo model {name!r} to {path}: {e.strerror or e}") from e
    return path


def cache_dir() -> Path:
    """Where built models are kept: $HETFLOW_CACHE/zoo, else ~/.cache/hetflow/zoo."""
    return cache_root() / "zoo"


def cached_model_path(name: str) -> Path:
    """Path of the model's ONNX file in the cache, building it the first time.

    The file name carries ZOO_VERSION, so a changed architecture is never served from an old file.
    Concurrent callers may both build; each write is atomic, so either result is whole.
    """
    key = _canonical(name)
    path = cache_dir() / f"{key}-{ZOO_VERSION}.onnx"
    if not path.is_file():
        export_model(key, path)
    return path
