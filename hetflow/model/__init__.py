"""Model: ONNX file -> CnnGraph; the built-in zoo; sub-network extraction."""
from __future__ import annotations

from pathlib import Path

from hetflow.errors import InputError

from hetflow.model.graph import CnnGraph, Edge, Layer, TensorInfo
from hetflow.model.reader import load_model, parse_input_shapes
from hetflow.model import zoo


def resolve_model(arg: str, input_shapes: dict[str, tuple[int, ...]] | None = None,
                  fuse: bool = False) -> CnnGraph:
    """A path to an ONNX file, or the name of a zoo model."""
    p = Path(arg)
    if p.exists() or p.suffix == ".onnx" or "/" in arg:
        return load_model(p, input_shapes, fuse)

    try:
        entry = zoo.get_entry(arg)
    except InputError:
        raise InputError(f"{arg}: no such file, and not a zoo model "
                         f"(known: {', '.join(e.name for e in zoo.list_models())})") from None
    return load_model(zoo.cached_model_path(entry.name), input_shapes, fuse, name=entry.name)


def is_zoo_model(name: str) -> bool:
    """Whether `name` names a zoo model (built on demand on any machine)."""
    try:
        zoo.get_entry(name)
    except InputError:
        return False
    return True


__all__ = ["CnnGraph", "Edge", "Layer", "TensorInfo", "is_zoo_model", "load_model",
           "parse_input_shapes", "resolve_model"]
