"""PyTorch on a CUDA GPU: ONNX sub-network -> torch module (onnx2torch) -> CUDA graph.

- Weights and activations stay on the device inside a sub-network; only its border tensors cross
  the bus. Small batch-1 CNN layers are launch-bound, so the forward is captured once as a CUDA
  graph on static device buffers and replayed (1.0-5x over eager on an H200, most for
  MobileNetV2). `cuda_graph=False` runs eager; a forward that cannot be
  captured (an op that reads a device value on the host) falls back to eager and says why in
  `runner.fallback_reason`.
- Borders: each input is written into a persistent pinned host buffer and copied to the device
  asynchronously on the runner's own stream; each output is copied back asynchronously into a
  pinned buffer; one wait for that stream per run. The copies are captured inside the CUDA
  graph with the forward (`graph_copies`, the default), so a run is one launch: on the H100
  machine this halved the driving thread's time per submit (emotion_ferplus 40 -> 20 us,
  alexnet 68 -> 42); where that
  capture fails, the copies are launched beside the graph.
- Returned arrays: each output is copied from the device into the runner's own pinned buffer,
  and the run returns a pageable copy of it, which the caller owns (the pipeline hands it to
  another stage; a later run cannot overwrite it). Views of fresh pinned blocks from PyTorch's
  caching host allocator, which this replaced, saved that host copy but made every run allocate
  a block and every consumer free one from its own thread: in GPU/CPU pipelines on the H100
  machine they ran 10-40% slower than the copy (alexnet 2,768-3,049 against 3,318-4,183
  frames/s, densenet121 718-814 against 926-1,152; resnet18 within noise; data-parallel and
  GPU-only plans unchanged).
- Lanes (`prepare_lanes`): k runners of one sub-network that share one copy of the weights on
  the device; each has its own stream, CUDA graph, static device buffers and pinned host
  buffers. `submit` launches a run (input copies, graph, output copies, then an event) and
  returns; `collect` waits for that event: one thread keeps k frames in flight
  (`backends.inflight`, the engine's drivers). The wait spins on the element's own driving
  core, which no CPU element computes on (`sync="spin"`, the default: one thread driving
  16-24 lanes ran up to 1.2x faster and far steadier than on blocking events, whose wake-ups
  came late by turns); `sync="block"` sleeps on a blocking CUDA event instead. A thread per
  lane cannot spin: lanes sharing one core then do not scale at all.
- Batches (`prepare_lanes(..., batch=b)`): the sub-network is rewritten to leading dim b
  before conversion (`backends.batching`: a Reshape whose constant target pins batch 1 gets
  b), so each lane holds one pinned host buffer of b frames, one copy in, one CUDA graph
  captured at b, one copy out. `run_frames`/`submit_frames` stage 1..b frames into it (the
  rows past them run what they held; their outputs are dropped), `collect_frames` splits the
  first n rows back. Where the element has cores besides its driving one, threads there
  stage part of each batch (`backends.staging`). A module
  converted at b is shared only by lanes of the same b. The device memory the k lanes took
  at build (the peak allocated over the build) is `runner.memory_bytes`.
- Precision is the element's (`gpu0@fp16`): fp32, tf32, fp16 or bf16 (bf16 where the device
  computes it natively, `native_bf16`). fp16/bf16: the module's weights are cast once; the
  border tensors keep the model's own type (float32; float16 for an fp16 file), and the casts
  to and from the compute dtype run on the device inside the CUDA graph, so channels, the CPU
  stages beside and the reference check see the model's types whatever a GPU computes in (an
  fp16 tensor would halve the bus bytes between two fp16 stages of a float32 model; that is
  not done). tf32: PyTorch's TF32 switches are process-wide, so a runner sets them
  only while it launches work from Python (warm-up, capture, eager runs), under one lock, and
  sets them back; a CUDA graph keeps the kernels chosen at its capture, so a tf32 runner and
  an fp32 one replay side by side in one process, each with its own math. The process default
  stays TF32 off, so fp32 results match the CPU reference closely; cudnn.benchmark is on.
- Layout: tf32, fp16 and bf16 modules run channels-last (`CHANNELS_LAST`): weights and 4-D
  inputs are laid out NHWC on the device, inside the graph, and 4-D outputs made NCHW again
  before they leave, so the borders and pinned buffers stay the model's NCHW.
- torch and onnx2torch are imported inside functions: this module imports without them (CI has
  no torch), and `prepare` raises BackendError saying what is missing.
"""
from __future__ import annotations

import functools
import threading
import warnings
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import onnx

from hetflow.backends.base import Backend
from hetflow.backends.batching import batched_subnet, check_batch, check_rows
from hetflow.backends.registry import register_backend
from hetflow.backends.staging import Stager
from hetflow.errors import BackendError, first_line

if TYPE_CHECKING:
    from hetflow.model.subnet import Subnet
    from hetflow.platform.spec import ProcessingElement

NAME = "torch_cuda"


# A lane's submit switches the thread's current stream to its own and back. torch.cuda's
# current_stream and set_stream do it through Stream objects (6-12 us the pair on the H200
# machine's host, holding the interpreter lock that the CPU copies' threads wait on); the calls
# under them take the (stream id, device index, device type) triple.
def current_stream_ids(torch, device_index: int) -> tuple[int, int, int]:
    get = getattr(torch._C, "_cuda_getCurrentStream", None)
    if get is None:  # not in this torch: the public call
        s = torch.cuda.current_stream(device_index)
        return s.stream_id, s.device_index, s.device_type
    return get(device_index)


def set_stream_ids(torch, ids: tuple[int, int, int]) -> None:
    set_ = getattr(torch._C, "_cuda_setStream", None)
    if set_ is None:
        torch.cuda.set_stream(torch.cuda.Stream(stream_id=ids[0], device_index=ids[1],
                                                device_type=ids[2]))
    else:
        set_(stream_id=ids[0], device_index=ids[1], device_type=ids[2])


_PAD_MODE_TO_ONNX = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}


def _missing_reason() -> str | None:
    """Why this backend cannot run here, or None when torch with CUDA and onnx2torch are there."""
    try:
        import torch
    except ImportError as e:
        return f"PyTorch with CUDA is not available: {first_line(e)}"
    if not torch.cuda.is_available():
        built = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "built without CUDA"
        return (f"PyTorch with CUDA is not available: torch {torch.__version__} ({built}) "
                "sees no CUDA device")
    try:
        import onnx2torch  # noqa: F401
    except ImportError as e:
        return f"onnx2torch is not available ({first_line(e)}); pip install onnx2torch"
    return None


COMPUTE_DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# precisions whose modules run channels-last (NHWC), the tensor cores' own layout: on the H200
# machine fp16 lanes replayed 1.12-1.64x faster so, bf16 1.03-1.54x, on resnet18, googlenet,
# alexnet, mobilenet_v2, densenet121 and vgg19 (b8-16, 4-8 lanes), tf32 1.14-1.43x on resnet18,
# googlenet and mobilenet_v2 (b32 x4), outputs within their rounding; fp32 without tensor
# cores ran resnet18 and googlenet 0.92x and 0.89x so, and stays NCHW
CHANNELS_LAST = ("tf32", "fp16", "bf16")
_MATH_FLAGS = threading.Lock()  # torch's TF32 switches are process-wide: one runner at a time


@contextmanager
def tf32_math(torch, on: bool):
    """TF32 for the matmuls and convolutions launched inside (`on`), else full fp32; the
    process-wide switches are set back after. Held under a lock: runners launching from
    several threads do not see each other's setting."""
    with _MATH_FLAGS:
        before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = on
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def native_bf16(torch) -> bool:
    """Whether the current CUDA device computes bf16 itself (Ampere and later); newer torch
    also says yes for emulated bf16, which is no faster than fp32."""
    try:
        return torch.cuda.is_bf16_supported(including_emulation=False)
    except TypeError:  # a torch without emulation reports native support only
        return torch.cuda.is_bf16_supported()


def configure_torch() -> None:
    """fp32 without TF32 (outputs match the CPU reference), cuDNN autotuning on."""
    import torch

    with _MATH_FLAGS:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True


# ---- ONNX -> torch -------------------------------------------------------------------------

def _outputs_from_single_output_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnx2torch returns a node's whole output tuple when a graph output is one of several
    outputs of its node (Split, MaxPool with indices): give such outputs an Identity node."""
    producer = {t: n for n in model.graph.node for t in n.output if t}
    if all(sum(1 for t in producer[o.name].output if t) == 1 for o in model.graph.output
           if o.name in producer):
        return model
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for out in fixed.graph.output:
        inner = f"{out.name}__hetflow_inner"
        for n in fixed.graph.node:
            n.output[:] = [inner if t == out.name else t for t in n.output]
            n.input[:] = [inner if t == out.name else t for t in n.input]
        fixed.graph.node.append(onnx.helper.make_node("Identity", [inner], [out.name],
                                                      name=f"{out.name}__hetflow_out"))
    return fixed


def _failing_node(model: onnx.ModelProto) -> tuple[str, str, str] | None:
    """(node name, op type, reason) of the first node onnx2torch cannot convert, if any."""
    from onnx2torch.node_converters import get_converter
    from onnx2torch.onnx_graph import OnnxGraph
    from onnx2torch.utils.safe_shape_inference import safe_shape_inference

    inferred = safe_shape_inference(model)
    opsets = {o.domain: o.version for o in inferred.opset_import}
    graph = OnnxGraph(inferred.graph)
    for node in graph.nodes.values():
        try:
            converter = get_converter(domain=node.domain, operation_type=node.operation_type,
                                      version=opsets.get(node.domain, 1))
            converter(node, graph)
        except Exception as e:
            return node.name or node.unique_name, node.operation_type, first_line(e)
    return None


def _constant(module, arg):
    """The value of a node input that is an initializer (a buffer of `module`), on the CPU;
    None for any other input."""
    if getattr(arg, "op", None) != "get_attr":
        return None
    return module.get_buffer(arg.target).detach().cpu()


def _static_pad(module, sub, node):
    """onnx2torch's Pad (opset >= 11) calls `pads.tolist()` on every run; with constant pads
    and value, its static Pad module (pads read once, here)."""
    from onnx2torch.node_converters.pad import OnnxPadStatic

    pads = _constant(module, node.args[1] if len(node.args) > 1 else None)
    value_arg = node.args[2] if len(node.args) > 2 else node.kwargs.get("constant_value")
    value = _constant(module, value_arg)
    if pads is None or (value_arg is not None and value is None):
        return None
    return OnnxPadStatic.create_from_onnx_params(
        onnx_pads=pads.tolist(), onnx_mode=_PAD_MODE_TO_ONNX[sub.mode],
        constant_value=0.0 if value is None else float(value))


@functools.cache
def _static_slice_class():
    import torch

    class StaticSlice(torch.nn.Module):
        """A Slice whose bounds were constants: Python slices, read once at conversion
        (flipped axes first, as onnx2torch does for negative steps)."""

        def __init__(self, flip_dims: list, pos_slices: list, neg_slices: list):
            super().__init__()
            self.flip_dims = flip_dims
            self.pos_slices, self.neg_slices = tuple(pos_slices), tuple(neg_slices)

        def forward(self, x):
            if self.flip_dims:
                x = torch.flip(x, dims=self.flip_dims)
            if self.pos_slices:
                x = x[self.pos_slices]
            if self.neg_slices:
                x = x[self.neg_slices]
            return x

    return StaticSlice


def _static_slice(module, sub, node):
    """onnx2torch's Slice (opset >= 10) reads its starts, ends, axes and steps on every run;
    with constant ones, as a row split's Slices have them, Python slices."""
    from onnx2torch.node_converters.slice import _get_slices

    args = list(node.args[1:]) + [node.kwargs.get(k) for k in ("axes", "steps")
                                  if k in node.kwargs]
    values = [_constant(module, a) for a in args]
    if len(values) < 2 or any(v is None for v in values):
        return None
    starts, ends = (np.asarray(v.tolist(), np.int64) for v in values[:2])
    axes = values[2] if len(values) > 2 else None
    steps = values[3] if len(values) > 3 else None
    flip, pos, neg = _get_slices(starts, ends, axes, steps)
    plain = [s if s is Ellipsis else slice(*(None if v is None else int(v)
                                             for v in (s.start, s.stop, s.step)))
             for s in (*pos, *neg)]
    return _static_slice_class()([int(d) for d in flip], plain[:len(pos)], plain[len(pos):])


@functools.cache
def _static_shape_classes():
    import torch

    class StaticReshape(torch.nn.Module):
        """A Reshape whose target shape was a constant, held as Python ints (0: the input's
        own size on that axis, as ONNX's allowzero=0 says)."""

        def __init__(self, shape: list):
            super().__init__()
            self.shape = [int(d) for d in shape]

        def forward(self, x):
            return torch.reshape(x, [x.shape[i] if d == 0 else d
                                     for i, d in enumerate(self.shape)])

    class StaticSelect(torch.nn.Module):
        """A Gather of one constant scalar index: that index taken on the axis, which goes."""

        def __init__(self, axis: int, index: int):
            super().__init__()
            self.axis, self.index = axis, index

        def forward(self, x):
            return torch.select(x, self.axis, self.index)

    return StaticReshape, StaticSelect


def _static_shape(module, sub, node):
    """onnx2torch's Reshape reads its target shape, its Squeeze (opset >= 13) its axes and its
    Gather a scalar index on every run (ShuffleNet's channel shuffle and ViT's attention have
    all three); with a constant one, Python values. A Gather of an index tensor indexes on the
    device and stays."""
    from onnx2torch.node_converters.reshape import OnnxReshape
    from onnx2torch.node_converters.squeeze import OnnxSqueezeDynamicAxes, OnnxSqueezeStaticAxes

    arg = node.args[1] if len(node.args) > 1 else next(iter(node.kwargs.values()), None)
    value = _constant(module, arg)
    if value is None:
        return None
    reshape, select = _static_shape_classes()
    if isinstance(sub, OnnxReshape):
        return reshape(value.tolist())
    if isinstance(sub, OnnxSqueezeDynamicAxes):
        return OnnxSqueezeStaticAxes([int(a) for a in value.reshape(-1).tolist()] or None)
    return select(sub._axis, int(value)) if value.dim() == 0 else None


def _freeze_constant_inputs(module):
    """Some onnx2torch modules read an input on the host on every run (a device-to-host sync,
    which a CUDA graph cannot capture). Where that input is an initializer, swap in a module
    that holds it as Python values, read once here; the node keeps only its data input."""
    from onnx2torch.node_converters.gather import OnnxGather
    from onnx2torch.node_converters.pad import OnnxPadDynamic
    from onnx2torch.node_converters.reshape import OnnxReshape
    from onnx2torch.node_converters.slice import OnnxSlice
    from onnx2torch.node_converters.squeeze import OnnxSqueezeDynamicAxes

    builders = ((OnnxPadDynamic, _static_pad), (OnnxSlice, _static_slice),
                ((OnnxReshape, OnnxSqueezeDynamicAxes, OnnxGather), _static_shape))
    changed = False
    for node in list(module.graph.nodes):
        if node.op != "call_module":
            continue
        sub = module.get_submodule(node.target)
        build = next((b for kinds, b in builders if isinstance(sub, kinds)), None)
        frozen = build(module, sub, node) if build is not None else None
        if frozen is None:
            continue
        module.add_submodule(node.target, frozen)
        node.args, node.kwargs = node.args[:1], {}
        changed = True
    return _recompiled(module) if changed else module


def _recompiled(module):
    """`module` after its graph was rewritten: dead nodes and unused submodules dropped."""
    module.graph.eliminate_dead_code()
    module.delete_all_unused_submodules()
    module.recompile()
    return module


def _shapes_known(model: onnx.ModelProto) -> bool:
    """Every node output of `model` has a shaped type among its inputs, outputs and value infos
    (a sub-network cut from a model read by hetflow: shapes were inferred when it was read)."""
    g = model.graph
    shaped = {v.name for v in (*g.input, *g.output, *g.value_info)
              if v.type.tensor_type.HasField("shape")}
    return all(t in shaped for n in g.node for t in n.output if t)


def _skip_known_shape_inference() -> None:
    """onnx2torch's `convert` starts with ONNX shape inference, a serialize, infer and parse
    round trip of all the weights: half of the 20 s that converting vgg19's layers and whole
    model took in a profile on the H100 machine. A model whose shapes are all known goes
    without it; any other still goes through it."""
    import onnx2torch.converter as converter

    original = converter.safe_shape_inference
    if getattr(original, "skips_known_shapes", False):
        return

    def infer(model, **kwargs):
        if isinstance(model, onnx.ModelProto) and _shapes_known(model):
            return model
        return original(model, **kwargs)

    infer.skips_known_shapes = True
    converter.safe_shape_inference = infer


@contextmanager
def _without_random_init():
    """onnx2torch builds each Conv and Gemm as a torch layer, which draws random weights, then
    replaces them with the model's own: 3 of the 5 s that converting vgg19's fully connected
    layers took on the H100 machine went to the draw. Inside this block those layers start
    uninitialised (torch.empty) instead; the converter writes every weight and bias after.
    One conversion at a time holds the patch, so the originals always come back."""
    from torch import nn
    from torch.nn.modules.conv import _ConvNd

    with _CONVERTING:
        saved = {cls: cls.__dict__["reset_parameters"] for cls in (nn.Linear, _ConvNd)}
        for cls in saved:
            cls.reset_parameters = lambda self: None
        try:
            yield
        finally:
            for cls, f in saved.items():
                cls.reset_parameters = f


_CONVERTING = threading.Lock()


def to_torch_module(model: onnx.ModelProto, name: str = "sub-network"):
    """An ONNX (sub-)model as a torch.fx.GraphModule in eval mode, on the CPU.

    Positional inputs follow the graph's inputs, outputs its outputs (one tensor, or a tuple).
    Raises BackendError naming the node and op type that onnx2torch cannot convert.
    """
    from onnx2torch import convert

    _skip_known_shape_inference()
    model = _outputs_from_single_output_nodes(model)
    try:
        with _without_random_init():
            module = convert(model)
    except Exception as e:
        failed = _failing_node(model)
        if failed is None:
            raise BackendError(f"{NAME}: onnx2torch cannot convert {name}: {first_line(e)}"
                               ) from None
        node, op, reason = failed
        raise BackendError(f"{NAME}: onnx2torch cannot convert node {node!r} ({op}) of {name}: "
                           f"{reason}") from None
    return _freeze_constant_inputs(module).eval()


# ---- the runner --------------------------------------------------------------------------

BORDER_TYPES = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.FLOAT16: "float16"}


def _border_types(subnet: "Subnet", names: list[str]) -> list[str]:
    """The float type each of the sub-network's inputs or outputs crosses its border in: the
    model's own (float16 for an fp16 file), whatever the element computes in."""
    infos = subnet.border_infos()
    return [BORDER_TYPES[infos[n].type.tensor_type.elem_type] for n in names]


def _border_shapes(subnet: "Subnet", names: list[str], what: str) -> list[tuple[int, ...]]:
    """Static shapes of the sub-network's inputs or outputs (a CUDA graph needs them)."""
    infos = subnet.border_infos()
    shapes = []
    for n in names:
        t = infos[n].type.tensor_type
        if t.elem_type not in BORDER_TYPES:
            raise BackendError(f"{NAME}: {what} {n!r} of {subnet.name} is "
                               f"{onnx.TensorProto.DataType.Name(t.elem_type)}; only float32 "
                               "and float16 tensors can cross a GPU stage border")
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in t.shape.dim]
        if not t.HasField("shape") or min(dims, default=1) <= 0:
            raise BackendError(f"{NAME}: {what} {n!r} of {subnet.name} has no static shape")
        shapes.append(tuple(dims))
    return shapes


class TorchCudaRunner:
    """One sub-network on one GPU; see the module docstring for buffers and streams."""

    def __init__(self, subnet: "Subnet", element: "ProcessingElement", module,
                 device_index: int, cuda_graph: bool = True, warmup: int = 3,
                 sync: str = "spin", graph_copies: bool = True, batch: int = 1,
                 stager: Stager | None = None, channels_last: bool = False):
        import torch

        if sync not in ("block", "spin"):
            raise BackendError(f"{NAME}: sync={sync!r}: use 'block' or 'spin'")
        self.subnet = subnet  # at leading dim `batch`
        self.element = element
        self.batch = batch
        self._stager: Stager | None = None  # attached once built, released by close
        self.memory_bytes: int | None = None  # set by prepare_lanes
        self._frames = 0  # frames of the run in flight (rows of the buffers that are real)
        self.inputs = list(subnet.inputs)
        self.outputs = list(subnet.outputs)
        self.precision = element.precision
        self._dtype = getattr(torch, COMPUTE_DTYPES[element.precision])
        self.channels_last = channels_last  # the module's 4-D tensors in NHWC (its weights too)
        self.mode = "eager"
        self.fallback_reason: str | None = None
        self.copies_in_graph = False  # the border copies are nodes of the CUDA graph
        self._complete = True  # the last run submitted is known to be complete
        self._torch = torch
        self._device = torch.device("cuda", device_index)
        self.input_shapes = shapes = _border_shapes(subnet, self.inputs, "input")
        _border_shapes(subnet, self.outputs, "output")
        in_types = [getattr(torch, t) for t in _border_types(subnet, self.inputs)]
        self._out_types = [getattr(torch, t) for t in _border_types(subnet, self.outputs)]
        with torch.cuda.device(self._device):
            self._stream = torch.cuda.Stream()
            self._stream_ids = (self._stream.stream_id, self._stream.device_index,
                                self._stream.device_type)
            self._done = torch.cuda.Event(blocking=sync == "block")  # a spin event waits busily
            self._module = module.to(self._device)  # no copy when already there (lanes)
            self._host_in = [torch.zeros(s, dtype=t, pin_memory=True)
                             for s, t in zip(shapes, in_types)]
            self._host_in_np = [h.numpy() for h in self._host_in]
            self._dev_in = [torch.zeros(s, dtype=t, device=self._device)
                            for s, t in zip(shapes, in_types)]
            self._graph = None
            self._static_out: list | None = None
            outs = self._warm_up(max(1, warmup))
            self._host_out = [torch.empty(o.shape, dtype=o.dtype, pin_memory=True) for o in outs]
            self._host_out_np = [h.numpy() for h in self._host_out]
            if cuda_graph:
                self._capture(graph_copies)
        self._stager = stager.attach() if stager is not None else None

    @property
    def caller_cores(self) -> tuple[int, ...]:
        return self.element.cores[:1]

    def _module_inputs(self) -> list:
        """The device inputs in the compute dtype (casts on the device, where they differ),
        4-D ones in NHWC where the module runs channels-last."""
        torch = self._torch
        if self.channels_last:
            return [x.to(self._dtype, memory_format=torch.channels_last) if x.dim() == 4
                    else x.to(self._dtype) for x in self._dev_in]
        return [x if x.dtype == self._dtype else x.to(self._dtype) for x in self._dev_in]

    def _forward(self) -> list:
        torch = self._torch
        with torch.inference_mode(), tf32_math(torch, self.precision == "tf32"):
            out = self._module(*self._module_inputs())
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != len(self.outputs):
            raise BackendError(f"{NAME}: {self.subnet.name} gave {len(outs)} outputs, expected "
                               f"{len(self.outputs)} ({self.outputs})")
        # the model's own type again at the border (float32, or float16 for an fp16 file):
        # channels carry it whatever the stage computes in
        outs = [o.to(t) if o.is_floating_point() and o.dtype != t else o
                for o, t in zip(outs, self._out_types)]
        # the pinned host buffers are NCHW: a channels-last output is laid out so on the device
        return [o.contiguous() for o in outs] if self.channels_last else outs

    def _warm_up(self, n: int) -> list:
        """Eager runs on the runner's (side) stream: cuDNN picks its algorithms, lazy inits
        happen before capture. The first run goes node by node to name a failing node. Gives
        the last run's outputs (their shapes size the pinned output buffers)."""
        torch = self._torch
        self._stream.wait_stream(torch.cuda.current_stream(self._device))
        with torch.cuda.stream(self._stream):
            try:
                self._run_naming_node()
                outs = self._forward()
                for _ in range(n - 2):
                    outs = self._forward()
                self._stream.synchronize()
            except BackendError:
                raise
            except Exception as e:
                raise BackendError(f"{NAME} failed running {self.subnet.name} on "
                                   f"{self.element.name}: {first_line(e)}") from None
        wrong = [o for o, t in zip(self.outputs, outs) if t.dim() == 0 or t.shape[0] != self.batch]
        if wrong:
            raise BackendError(f"{NAME}: {self.subnet.name} on {self.element.name} at batch "
                               f"{self.batch}: output {wrong[0]!r} does not carry the batch "
                               "(its leading dim is not the batch)")
        return outs

    def _run_naming_node(self) -> None:
        from torch.fx import Interpreter

        outer = self

        class NamingInterpreter(Interpreter):
            def run_node(self, n):
                try:
                    return super().run_node(n)
                except Exception as e:
                    if n.op != "call_module":
                        raise
                    node, op = outer._onnx_node_of(n.target)
                    raise BackendError(f"{NAME}: node {node!r} ({op}) of sub-network "
                                       f"{outer.subnet.name} failed on {outer.element.name}: "
                                       f"{first_line(e)}") from None

        with self._torch.inference_mode(), tf32_math(self._torch, self.precision == "tf32"):
            NamingInterpreter(self._module).run(*self._module_inputs())

    def _onnx_node_of(self, module_name: str) -> tuple[str, str]:
        """(ONNX node name, op type) of the torch module onnx2torch named `module_name`."""
        from onnx2torch.onnx_graph import OnnxGraph

        nodes = OnnxGraph(self.subnet.model.graph).nodes
        node = nodes.get(module_name)
        return (node.name or module_name, node.operation_type) if node else (module_name, "?")

    def _capture(self, copies: bool) -> None:
        """The forward as a CUDA graph; with `copies`, the border copies (pinned host buffers
        to device and back) inside it too, so that a run is one launch; where that capture
        fails, the forward alone."""
        torch = self._torch
        for with_copies in ((True, False) if copies else (False,)):
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph, stream=self._stream):
                    if with_copies:
                        self._copy_in()
                    static_out = self._forward()
                    if with_copies:
                        self._copy_out(static_out)
            except Exception as e:
                self.fallback_reason = first_line(e)
                torch.cuda.synchronize(self._device)
                continue
            self._graph, self._static_out, self.mode = graph, static_out, "cuda_graph"
            self.copies_in_graph, self.fallback_reason = with_copies, None
            return
        warnings.warn(f"{NAME}: {self.subnet.name} cannot be captured as a CUDA graph, "
                      f"running eager: {self.fallback_reason}", RuntimeWarning, stacklevel=3)

    def set_priority(self, rank: int, of: int) -> None:
        """Launch on a stream of the `rank`-th of `of` priorities (0: the highest), spread over
        the device's range: the GPU starts the waiting blocks of a higher-priority stream
        first, so its kernels slip in between a long batch's blocks of another stream."""
        torch = self._torch
        low, high = torch.cuda.Stream.priority_range()  # e.g. (0, -5): lower is higher
        level = high + round((low - high) * rank / max(1, of - 1))
        with torch.cuda.device(self._device):
            self._stream.synchronize()
            self._stream = torch.cuda.Stream(priority=level)
            self._stream_ids = (self._stream.stream_id, self._stream.device_index,
                                self._stream.device_type)
        self.stream_priority = level

    def _copy_in(self) -> None:
        for host, dev in zip(self._host_in, self._dev_in):
            dev.copy_(host, non_blocking=True)

    def _copy_out(self, outs: list) -> None:
        for out, host in zip(outs, self._host_out):
            host.copy_(out, non_blocking=True)

    def replay(self, sync: bool = True) -> None:
        """The device work of one run (the border copies too where the graph holds them), no
        host staging (timing). `sync=False` only launches it; `synchronize` then waits for
        everything launched."""
        with self._torch.cuda.device(self._device), self._torch.cuda.stream(self._stream):
            self._compute()
        if sync:
            self.synchronize()

    def synchronize(self) -> None:
        """Wait for everything launched on this runner's stream (on its event, so as `sync`
        says: spinning or blocking)."""
        self._done.record(self._stream)
        self._done.synchronize()
        self._complete = True

    def _compute(self) -> list:
        if self._graph is not None:
            self._graph.replay()
            return self._static_out
        return self._forward()

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.submit(feeds)
        return self.collect()

    def run_frames(self, frames) -> list[dict[str, np.ndarray]]:
        """1..batch frames (leading dim 1 each) in one run; their outputs, in order."""
        self.submit_frames(frames)
        return self.collect_frames()

    def submit(self, feeds: Mapping[str, np.ndarray]) -> None:
        """Launch one run (input copies, the forward, output copies) on this runner's stream
        and return at once; `collect` waits for it and gives its outputs. One run in flight
        per runner: a lane is free again once its run was collected. A batched runner runs
        the frame padded to its batch."""
        if self.batch > 1:
            self.submit_frames([feeds])
            return
        if self._module is None:
            raise BackendError(f"{NAME}: runner of {self.subnet.name} is closed")
        for name, host_np in zip(self.inputs, self._host_in_np):
            self._stage_input(name, feeds, host_np)
        self._frames = 1
        self._launch()

    def submit_frames(self, frames) -> None:
        """Launch one run of 1..batch frames (the first rows of the pinned buffers);
        `collect_frames` gives their outputs. The rows past them are not staged: they hold
        what they held (earlier frames; zeros at first), run, and their outputs are dropped,
        as padding's would be (no row of a CNN at inference reads another). Staging copies of
        the last frame instead cost mobilenet_v2's b32 firings of 5 frames on the H200 machine
        about 3 ms of host copies (27 rows of 0.6 MB)."""
        if self._module is None:
            raise BackendError(f"{NAME}: runner of {self.subnet.name} is closed")
        rows = list(frames)
        check_rows(len(rows), self.batch, f"{self.subnet.name} on {self.element.name}")

        def stage_rows(start: int, end: int) -> None:
            for name, host_np in zip(self.inputs, self._host_in_np):
                for i in range(start, end):
                    self._stage_input(name, rows[i], host_np[i:i + 1])

        if self._stager is not None:
            self._stager.stage(len(rows), stage_rows)
        else:
            stage_rows(0, len(rows))
        self._frames = len(rows)
        self._launch()

    def _launch(self) -> None:
        torch = self._torch
        if self.copies_in_graph:
            # the graph runs on the thread's current stream: this lane's, then the caller's
            # again (setting a stream sets its device too)
            caller = current_stream_ids(torch, self._device.index)
            set_stream_ids(torch, self._stream_ids)
            try:
                self._graph.replay()
            finally:
                set_stream_ids(torch, caller)
        else:
            with torch.cuda.device(self._device), torch.cuda.stream(self._stream):
                self._copy_in()
                self._copy_out(self._compute())
        self._done.record(self._stream)
        self._complete = False

    def finished(self) -> bool:
        """Whether the submitted run is complete (never waits)."""
        if not self._complete:
            self._complete = self._done.query()
        return self._complete

    def wait(self) -> None:
        """Wait for the submitted run to complete (the GIL released meanwhile)."""
        if not self._complete:
            self._done.synchronize()
            self._complete = True

    def collect(self) -> dict[str, np.ndarray]:
        """Wait for the submitted run; its outputs, as arrays the caller owns. A run already
        seen complete is not waited for again: each wait gives the GIL up and takes it back,
        which other busy threads can delay."""
        if self._frames != 1:
            raise BackendError(f"{NAME}: {self.subnet.name} on {self.element.name}: collect "
                               f"after a run of {self._frames} frames (use collect_frames)")
        self.wait()
        return {name: host[:1].copy() if self.batch > 1 else host.copy()
                for name, host in zip(self.outputs, self._host_out_np)}

    def collect_frames(self) -> list[dict[str, np.ndarray]]:
        """Wait for the submitted run; the outputs of its real frames (leading dim 1 each,
        arrays the caller owns), in order; the padding's are dropped."""
        self.wait()
        return [{name: host[i:i + 1].copy() for name, host in zip(self.outputs, self._host_out_np)}
                for i in range(self._frames)]

    def _stage_input(self, name: str, feeds: Mapping[str, np.ndarray], dst: np.ndarray) -> None:
        try:
            src = feeds[name]
        except KeyError:
            raise BackendError(f"sub-network {self.subnet.name} on {self.element.name}: input "
                               f"{name!r} was not given (needs {self.inputs})") from None
        if np.shape(src) != dst.shape:
            raise BackendError(f"sub-network {self.subnet.name} on {self.element.name}: input "
                               f"{name!r} has shape {np.shape(src)}, expected {dst.shape}")
        np.copyto(dst, src, casting="same_kind")

    def close(self) -> None:
        if self._module is not None:
            self._stream.synchronize()
        if self._stager is not None:
            self._stager.release()
            self._stager = None
        self._graph = self._static_out = self._module = None
        self._host_in, self._host_in_np, self._dev_in = [], [], []
        self._host_out, self._host_out_np = [], []


class TorchCudaBackend(Backend):
    name = NAME
    kinds = ("gpu",)
    precisions = tuple(COMPUTE_DTYPES)
    revision = 2  # 2: tf32, fp16 and bf16 modules run channels-last

    @classmethod
    def available(cls) -> tuple[bool, str]:
        reason = _missing_reason()
        return reason is None, reason or ""

    def prepare(self, subnet: "Subnet", element: "ProcessingElement", *, cuda_graph: bool = True,
                warmup: int = 3, sync: str = "spin", graph_copies: bool = True,
                batch: int = 1, **_ignored: Any) -> TorchCudaRunner:
        """`cuda_graph`: capture the forward as a CUDA graph (False: eager).
        `warmup`: eager runs before capture (cuDNN autotuning). `sync`: see the module notes.
        `graph_copies`: the border copies inside the graph (one launch a run). `batch`:
        frames a run."""
        return self.prepare_lanes(subnet, element, 1, cuda_graph=cuda_graph, warmup=warmup,
                                  sync=sync, graph_copies=graph_copies, batch=batch)[0]

    def prepare_lanes(self, subnet: "Subnet", element: "ProcessingElement", lanes: int, *,
                      cuda_graph: bool = True, warmup: int = 3, sync: str = "spin",
                      graph_copies: bool = True, like: TorchCudaRunner | None = None,
                      batch: int = 1, channels_last: bool | None = None,
                      **_ignored: Any) -> list[TorchCudaRunner]:
        """`lanes` runners over one copy of the weights (see the module notes): the weights of
        `like`, a runner of the same sub-network and batch on the same element, where given
        (more lanes for a pool), else a fresh conversion. `batch`: frames a run. A lane count
        that the device memory cannot hold is a BackendError naming the element, batch and
        lane count."""
        reason = _missing_reason()
        if reason is not None:
            raise BackendError(f"{NAME} cannot run {subnet.name} on {element.name}: {reason}")
        import torch

        if element.kind != "gpu":
            raise BackendError(f"{NAME} runs on GPU elements, not on {element.name!r} "
                               f"({element.kind})")
        index = element.device_index or 0
        if not 0 <= index < torch.cuda.device_count():
            raise BackendError(f"{NAME}: element {element.name!r} names CUDA device {index}, but "
                               f"this machine has {torch.cuda.device_count()}")
        self.check_precision(subnet, element)
        if element.precision == "bf16":
            with torch.cuda.device(index):
                if not native_bf16(torch):
                    raise BackendError(f"{NAME}: element {element.name!r}: CUDA device {index} "
                                       f"({torch.cuda.get_device_name(index)}) does not "
                                       "support bf16")
        batch = check_batch(batch, f"{NAME} on {element.name}")
        if channels_last is None:
            channels_last = element.precision in CHANNELS_LAST
        configure_torch()
        subnet = batched_subnet(subnet, batch)
        torch.cuda.synchronize(index)
        torch.cuda.reset_peak_memory_stats(index)
        before = torch.cuda.memory_allocated(index)
        module = getattr(like, "_module", None)  # in the compute dtype of `like`'s element
        if module is None or (like.precision, like.batch, like.channels_last) != (
                element.precision, batch, channels_last):
            module = to_torch_module(subnet.model, subnet.name).to(
                getattr(torch, COMPUTE_DTYPES[element.precision]))
            if channels_last:
                module = module.to(memory_format=torch.channels_last)
        runners: list[TorchCudaRunner] = []
        # the element's other cores help its driving thread stage a batch (backends.staging):
        # one stager for all its lanes, those added to `like`'s pool included
        stager = None
        if batch > 1 and len(element.cores) > 1:
            stager = getattr(like, "_stager", None) or Stager(element.cores[1:])
        try:
            for lane in range(max(1, lanes)):
                try:
                    runners.append(TorchCudaRunner(subnet, element, module, index, cuda_graph,
                                                   warmup, sync, graph_copies, batch, stager,
                                                   channels_last))
                except torch.cuda.OutOfMemoryError:
                    free, total = torch.cuda.mem_get_info(index)
                    raise BackendError(
                        f"{NAME}: element {element.name!r} cannot hold {lanes} lanes of "
                        f"{subnet.name} at batch {batch}: device memory ran out at lane "
                        f"{lane + 1} ({free / 2**30:.1f} of {total / 2**30:.1f} GiB free)"
                    ) from None
        except BaseException:
            for r in runners:
                r.close()
            raise
        torch.cuda.synchronize(index)
        used = max(0, torch.cuda.max_memory_allocated(index) - before)
        for r in runners:
            r.memory_bytes = used
        return runners


register_backend(NAME, TorchCudaBackend)
