"""int8 sub-networks for ONNX Runtime on CPUs: static QDQ quantization, cached on disk.

Static, not dynamic: `quantize_dynamic` turns a Conv into ConvInteger, for which ORT's CPU
kernels are no faster than fp32 (resnet18 on one core of the 2-core AVX-512-VNNI machine:
98 ms against 101 ms fp32), while static QDQ becomes QLinearConv with its scales fixed
ahead of time (26 ms). Static needs calibration frames: the caller's (activations the fp32
model produced, the better choice for a stage in the middle of a network), else random
normal frames of the sub-network's input shapes, seeded so the result is reproducible.

Recipe: ORT's basic graph rewrites first (Conv+BatchNormalization folded, so the folded
weights are what is quantized; Pad_Fusion left out as for every hetflow session), then QDQ
with per-channel signed int8 weights and unsigned int8 activations, MinMax calibration. On CPUs
without VNNI, u8 x s8 products can saturate (ORT suggests reduce_range there); it is not set.

The quantized model is kept under `<hetflow cache>/int8/`, keyed by a sha256 of the
sub-network's bytes, the calibration frames and `RECIPE`: a changed layer, other frames or a
new recipe never reuse an old file.
"""
from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import onnx

from hetflow.errors import BackendError, first_line
from hetflow.io import atomic_write_bytes, cache_root
import onnxruntime as ort
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

if TYPE_CHECKING:
    from hetflow.model.subnet import Subnet

RECIPE = "qdq-s8w-perchannel-u8a-minmax-basicopt-v1"  # change it when the recipe changes
CALIBRATION_FRAMES = 8
Feeds = Mapping[str, np.ndarray]


def random_calibration(subnet: "Subnet", frames: int = CALIBRATION_FRAMES,
                       seed: int = 0) -> list[dict[str, np.ndarray]]:
    """`frames` feeds of standard normal float32 values in the sub-network's input shapes."""
    infos = {v.name: v for v in subnet.model.graph.input}
    rng = np.random.default_rng(seed)
    shapes = {}
    for name in subnet.inputs:
        t = infos[name].type.tensor_type
        if t.elem_type != onnx.TensorProto.FLOAT:
            raise BackendError(f"int8: input {name!r} of {subnet.name} is "
                               f"{onnx.TensorProto.DataType.Name(t.elem_type)}; random "
                               "calibration frames are float32 only")
        shapes[name] = [d.dim_value if d.dim_value > 0 else 1 for d in t.shape.dim]
    return [{n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
            for _ in range(frames)]


def quantized_key(subnet: "Subnet", calibration: Sequence[Feeds]) -> str:
    if "sha256" not in subnet._memo:  # hashing vgg19's weights takes a second: once a cut
        subnet._memo["sha256"] = hashlib.sha256(subnet.serialized()).hexdigest()
    h = hashlib.sha256(RECIPE.encode())
    h.update(subnet._memo["sha256"].encode())
    for feeds in calibration:
        for name in sorted(feeds):
            a = np.ascontiguousarray(feeds[name], dtype=np.float32)
            h.update(name.encode() + str(a.shape).encode() + a.tobytes())
    return h.hexdigest()[:32]


def int8_model_path(subnet: "Subnet", calibration: Sequence[Feeds] | None = None) -> Path:
    """The int8 ONNX file of `subnet` (built on first use, then taken from the cache)."""
    frames = list(calibration) if calibration is not None else random_calibration(subnet)
    if not frames:
        raise BackendError(f"int8: no calibration frames for {subnet.name}")
    path = cache_root() / "int8" / f"{quantized_key(subnet, frames)}.onnx"
    if not path.is_file():
        atomic_write_bytes(path, _quantize(subnet, frames))
    return path


class _Frames:
    """onnxruntime.quantization's CalibrationDataReader protocol over a list of feeds."""

    def __init__(self, frames: Sequence[Feeds]):
        self._frames = frames
        self.rewind()

    def get_next(self) -> dict[str, np.ndarray] | None:
        feeds = next(self._it, None)
        return None if feeds is None else {k: np.asarray(v, np.float32) for k, v in feeds.items()}

    def rewind(self) -> None:
        self._it = iter(self._frames)


def _quantize(subnet: "Subnet", frames: list[Feeds]) -> bytes:

    from hetflow.backends.ort_cpu import DISABLED_OPTIMIZERS

    with tempfile.TemporaryDirectory(prefix="hetflow-int8-") as tmp:
        folded, out = Path(tmp) / "folded.onnx", Path(tmp) / "int8.onnx"
        try:
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            so.optimized_model_filepath = str(folded)
            so.log_severity_level = 4
            ort.InferenceSession(subnet.serialized(), so, providers=["CPUExecutionProvider"],
                                 disabled_optimizers=DISABLED_OPTIMIZERS)
            # what onnxruntime's quant_pre_process does is done (shapes were inferred when
            # hetflow read the model, the rewrites just now): mark it so, as that step does,
            # or quantize_static logs a warning for every sub-network
            model = onnx.load(folded)
            onnx.helper.set_model_props(model, {**{p.key: p.value for p in model.metadata_props},
                                                "onnx.quant.pre_process": "onnxruntime.quant"})
            onnx.save(model, folded)
            quantize_static(folded, out, _Frames(frames), quant_format=QuantFormat.QDQ,
                            per_channel=True, weight_type=QuantType.QInt8,
                            activation_type=QuantType.QUInt8)
        except Exception as e:
            raise BackendError(f"int8: onnxruntime cannot quantize {subnet.name}: "
                               f"{first_line(e)}") from None
        return out.read_bytes()
