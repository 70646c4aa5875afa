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

ONNX Runtime's quantizer takes float32 models. A float16 sub-network (an fp16 export) is
quantized from a float32 copy (`float32_copy`) whose borders cast from and to float16, so the
int8 stage takes and gives the tensors its neighbours in the fp16 model do.

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


FLOATS = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16}


def input_dtypes(model: onnx.ModelProto, subnet: "Subnet") -> dict[str, type]:
    """{input: numpy dtype} of `model`'s graph inputs that are the sub-network's (float32 or
    float16; anything else is a BackendError naming the input)."""
    infos = {v.name: v for v in model.graph.input}
    out = {}
    for name in subnet.inputs:
        elem = infos[name].type.tensor_type.elem_type
        if elem not in FLOATS:
            raise BackendError(f"int8: input {name!r} of {subnet.name} is "
                               f"{onnx.TensorProto.DataType.Name(elem)}; int8 quantizes "
                               "float32 and float16 sub-networks only")
        out[name] = FLOATS[elem]
    return out


def random_calibration(subnet: "Subnet", frames: int = CALIBRATION_FRAMES,
                       seed: int = 0) -> list[dict[str, np.ndarray]]:
    """`frames` feeds of standard normal values in the sub-network's input shapes and types."""
    infos = subnet.border_infos()
    dtypes = input_dtypes(subnet.model, subnet)
    rng = np.random.default_rng(seed)
    shapes = {n: [d.dim_value if d.dim_value > 0 else 1
                  for d in infos[n].type.tensor_type.shape.dim] for n in subnet.inputs}
    return [{n: rng.standard_normal(s).astype(dtypes[n]) for n, s in shapes.items()}
            for _ in range(frames)]


def float32_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` computing in float32 where it computed in float16: float16 initializers,
    constants, casts and value types become float32, and each float16 graph input and output
    stays float16 through a Cast at the border (`NAME` casts into `NAME__fp32`, which the
    graph uses instead)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    half, full = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT

    def widen(t: onnx.TensorProto) -> None:
        if t.data_type == half:
            t.CopyFrom(onnx.numpy_helper.from_array(
                onnx.numpy_helper.to_array(t).astype(np.float32), t.name))

    for t in g.initializer:
        widen(t)
    for v in g.value_info:
        if v.type.tensor_type.elem_type == half:
            v.type.tensor_type.elem_type = full
    for node in g.node:
        for a in node.attribute:
            if a.name == "to" and node.op_type == "Cast" and a.i == half:
                a.i = full
            elif a.type == onnx.AttributeProto.TENSOR:
                widen(a.t)
    borders_in = [v.name for v in g.input if v.type.tensor_type.elem_type == half]
    borders_out = [v.name for v in g.output if v.type.tensor_type.elem_type == half]
    inner = {n: f"{n}__fp32" for n in (*borders_in, *borders_out)}
    for node in g.node:  # (a graph output may feed a node too: it reads the float32 one)
        node.input[:] = [inner.get(n, n) for n in node.input]
        node.output[:] = [inner[n] if n in borders_out else n for n in node.output]
    casts = [onnx.helper.make_node("Cast", [n], [inner[n]], to=full, name=f"{n}__to_fp32")
             for n in borders_in]
    back = [onnx.helper.make_node("Cast", [inner[n]], [n], to=half, name=f"{n}__to_fp16")
            for n in borders_out]
    nodes = [*casts, *g.node, *back]
    del g.node[:]
    g.node.extend(nodes)
    return m


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
    """onnxruntime.quantization's CalibrationDataReader protocol over a list of feeds, each
    array in its input's dtype (`dtypes`)."""

    def __init__(self, frames: Sequence[Feeds], dtypes: Mapping[str, type]):
        self._frames, self._dtypes = frames, dtypes
        self.rewind()

    def get_next(self) -> dict[str, np.ndarray] | None:
        feeds = next(self._it, None)
        return None if feeds is None else {k: np.asarray(v, self._dtypes.get(k, np.float32))
                                           for k, v in feeds.items()}

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
            dtypes = input_dtypes(subnet.model, subnet)
            source = subnet.serialized()
            if any(t is np.float16 for t in dtypes.values()) or _has_half(subnet.model):
                source = float32_copy(subnet.model).SerializeToString()
            ort.InferenceSession(source, so, providers=["CPUExecutionProvider"],
                                 disabled_optimizers=DISABLED_OPTIMIZERS)
            # what onnxruntime's quant_pre_process does is done (shapes were inferred when
            # hetflow read the model, the rewrites just now): mark it so, as that step does,
            # or quantize_static logs a warning for every sub-network
            model = onnx.load(folded)
            onnx.helper.set_model_props(model, {**{p.key: p.value for p in model.metadata_props},
                                                "onnx.quant.pre_process": "onnxruntime.quant"})
            onnx.save(model, folded)
            quantize_static(folded, out, _Frames(frames, dtypes), quant_format=QuantFormat.QDQ,
                            per_channel=True, weight_type=QuantType.QInt8,
                            activation_type=QuantType.QUInt8)
        except BackendError:
            raise
        except Exception as e:
            raise BackendError(f"int8: onnxruntime cannot quantize {subnet.name}: "
                               f"{first_line(e)}") from None
        return out.read_bytes()


def _has_half(model: onnx.ModelProto) -> bool:
    """Whether any initializer of `model` is float16 (a float32-fed model with fp16 weights)."""
    return any(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer)
