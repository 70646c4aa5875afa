"""Frame sources: random frames (a small pool, reused cyclically), arrays from an .npz file, or
images from a folder (decoded with Pillow, resized to the model's input, ImageNet-normalised)."""
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
    """An .npz with one array per model input, frames along the first axis (N x shape, or
    N x shape-without-its-batch-axis-of-1)."""
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
        if a.shape[1:] != shape and shape[:1] == (1,) and a.shape[1:] == shape[1:]:
            a = a[:, None]  # N frames without the batch axis of 1
        if a.shape[1:] != shape:
            raise InputError(f"{path}: array {t!r} has shape {a.shape}; expected N x {shape}")
        arrays[t] = a.astype(_NP.get(graph.tensors[t].dtype, np.float32))
    n = min(len(a) for a in arrays.values())
    if n == 0:
        raise InputError(f"{path}: holds no frames")
    return (lambda f: {t: a[f % n] for t, a in arrays.items()}), n


IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".pgm", ".gif", ".tif", ".tiff", ".webp"}
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


def image_dir_source(graph: CnnGraph, folder: str | Path) -> tuple[Callable[[int], dict], int]:
    """Every image of `folder` (sorted by name) as one frame of the model's single NCHW input:
    resized to HxW, RGB (3 channels) or grey (1), scaled to [0, 1] and ImageNet-normalised (grey
    images: mean 0.5, std 0.5). Frames cycle when the run asks for more than there are."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: no such image folder")
    if len(graph.inputs) != 1:
        raise InputError(f"--input {folder}: images feed models with one input; {graph.name} has "
                         f"{len(graph.inputs)} ({', '.join(graph.inputs)}): use an .npz file")
    name = graph.inputs[0]
    shape = graph.tensors[name].shape
    if len(shape) != 4 or shape[0] != 1 or shape[1] not in (1, 3):
        raise InputError(f"--input {folder}: input {name!r} has shape {shape}; images need "
                         "1x3xHxW or 1x1xHxW")
    try:
        from PIL import Image
    except ImportError:
        raise InputError("--input IMAGE_DIR needs Pillow: pip install pillow") from None
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise InputError(f"{folder}: no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
    _, c, h, w = shape
    frames = []
    for p in files:
        try:
            with Image.open(p) as im:
                im = im.convert("RGB" if c == 3 else "L").resize((w, h), Image.BILINEAR)
                a = np.asarray(im, dtype=np.float32) / 255.0
        except OSError as e:
            raise InputError(f"{p}: not a readable image ({e})") from None
        if c == 3:
            a = ((a - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)
        else:
            a = ((a - 0.5) / 0.5)[None]
        frames.append({name: np.ascontiguousarray(a[None], dtype=np.float32)})
    return (lambda f: frames[f % len(frames)]), len(frames)
