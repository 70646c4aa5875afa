"""Frame sources: random frames (a small pool, reused cyclically) or arrays from an .npz file."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from hetflow.errors import InputError
from hetflow.model.graph import CnnGraph

_NP = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "int64": np.int64,
       "int32": np.int32, "uint8": np.uint8, "int8": np.int8, "bool": np.bool_}


def random_source(graph: CnnGraph, seed: int = 0, pool: int = 8) -> Callable[[int], dict]:
    rng = np.random.default_rng(seed)
    frames = [{t: rng.standard_normal(graph.tensors[t].shape).astype(_NP.get(graph.tensors[t].dtype, np.float32))
               for t in graph.inputs} for _ in range(pool)]
    return lambda f: frames[f % pool]


def npz_source(graph: CnnGraph, path: str | Path) -> tuple[Callable[[int], dict], int]:
    """An .npz with one array per model input, frames along the first axis (N x shape)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such input file")
    try:
        data = np.load(path)
    except Exception as e:
        raise InputError(f"{path}: not a readable .npz file ({e})") from None
    arrays = {}
    for t in graph.inputs:
        if t not in data:
            raise InputError(f"{path}: no array named {t!r} (the model's inputs are {graph.inputs})")
        a = data[t]
        shape = graph.tensors[t].shape
        if a.shape[1:] != shape:
            raise InputError(f"{path}: array {t!r} has shape {a.shape}; expected N x {shape}")
        arrays[t] = a.astype(_NP.get(graph.tensors[t].dtype, np.float32))
    n = min(len(a) for a in arrays.values())
    if n == 0:
        raise InputError(f"{path}: holds no frames")
    return (lambda f: {t: a[f % n] for t, a in arrays.items()}), n
