"""ONNX Runtime on a group of CPU cores: one InferenceSession per sub-network.

- `intra_op_num_threads` = the element's core count, `inter_op_num_threads` = 1, sequential
  execution: a stage uses exactly its cores, so stages on other cores are not disturbed.
- The pool's N-1 threads are pinned with `session.intra_op_thread_affinities` (ORT numbers
  processors from 1); the thread that calls `run` is the N-th and the caller pins it to
  `caller_cores` (the element's first core).
- Spinning is off by default: a spinning pool thread burns a core that another stage may need
  (turn it on with spinning=True when one stage owns the whole machine).
- Graph optimisation ALL: ORT fuses Conv+BN+activation inside a sub-network.
`run` is a plain `session.run` with numpy feeds: with io_binding and a new output per call, the
40 layers of resnet18 took 36 ms against 31 ms on one core, so it is not used there.
`benchmark` binds preallocated outputs once, for the profiler.
- Single cores share sessions (`prepare_like`): a one-core session has no pool threads, a run
  executes on the thread that calls it and ORT runs one session from many threads at once, so
  the copies of one sub-network on many single cores need one session, not one each. Building
  fifteen vgg19 sessions, one a core, took 14 s on the 16-core GPU machine, and each holds its
  own ~0.7 GB of (re-laid-out) weights.
- Batches (`prepare(..., batch=b)`): a session of the sub-network at leading dim b
  (`backends.batching`); `run_frames` stacks 1..b frames, pads to b and splits the outputs.
  A CPU element runs batched only where the profile measured a frame faster that way.
- int8 elements run the sub-network quantized statically to QDQ (`hetflow.backends.quantize`:
  why static, the recipe, the cache); inputs and outputs stay float32, so channels do not
  change. Calibration frames: `prepare(..., calibration=[feeds, ...])`, else random ones.
"""
from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from hetflow.backends.base import Backend
from hetflow.backends.batching import batched_subnet, check_batch, gather, split
from hetflow.backends.quantize import int8_model_path
from hetflow.backends.registry import register_backend
from hetflow.errors import BackendError
import onnxruntime as ort

if TYPE_CHECKING:
    from hetflow.model.subnet import Subnet
    from hetflow.platform.spec import ProcessingElement

_OPT_LEVELS = ("disable", "basic", "extended", "all")


def _first_line(e: BaseException) -> str:
    """ORT's message without its status prefix and C++ source location."""
    text = str(e).strip()
    text = re.sub(r"^\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*", "", text)
    m = re.match(r"\S+\.(?:cc|h|cpp):\d+ ", text)
    if m:  # '/src/x.cc:256 ns::Func(args...) message': skip the signature
        depth, i = 0, m.end()
        while i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
            if depth == 0 and text[i - 1] == ")":
                break
        text = text[i:].strip()
    text = re.sub(r"/\S+\.(?:cc|h|cpp):\d+ [\w:~<>]+\([^()]*\) ", "", text)
    return text.splitlines()[0] if text else type(e).__name__


def _blame(message: str, subnet: "Subnet") -> str:
    """'node NAME (OP) of ' for the node ORT complains about, or '' if it names none."""
    nodes = list(subnet.model.graph.node)
    for pat in (r'In Node, \("([^"]*)"', r"node with name '([^']*)'", r"Node \(([^)]*)\)",
                r"[Nn]ode:? ?'?([\w./:-]+)'?"):
        m = re.search(pat, message)
        if m:
            for n in nodes:
                if n.name == m.group(1):
                    return f"node {n.name!r} ({n.op_type}) of "
    for n in nodes:  # no name given: the first node whose operator the message mentions
        op = f"{n.domain}:{n.op_type}" if n.domain else n.op_type
        if re.search(rf"(?<![\w.:]){re.escape(op)}(?!\w)", message):
            return f"node {n.name!r} ({op}) of "
    return ""


# ORT's Pad_Fusion folds a Pad(0) into a following MaxPool, whose padding then acts as -inf
# instead of 0: wrong outputs for tiny_yolo_v2 (seen with ORT 1.30/1.31; ORT PR #18136 names
# the same fusion). Disabling that one rewrite rule keeps every other optimisation.
DISABLED_OPTIMIZERS = ["Pad_Fusion"]


def session_options(cores: tuple[int, ...], spinning: bool = False, optimization: str = "all",
                    profile_prefix: str | None = None):

    so = ort.SessionOptions()
    so.intra_op_num_threads = max(1, len(cores))
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[optimization]
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if len(cores) > 1:
        so.add_session_config_entry("session.intra_op_thread_affinities",
                                    ";".join(str(c + 1) for c in cores[1:]))
    so.log_severity_level = 4  # ORT logs errors to stderr too; we raise them as BackendError
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return so


class OrtCpuRunner:
    def __init__(self, subnet: "Subnet", element: "ProcessingElement", session,
                 profiling: bool = False, batch: int = 1):
        self.subnet = subnet  # at leading dim `batch`
        self.element = element
        self.session = session
        self.profiling = profiling  # the session writes a profile file: it is never shared
        self.batch = batch
        self.inputs = list(subnet.inputs)
        self.outputs = list(subnet.outputs)

    @property
    def caller_cores(self) -> tuple[int, ...]:
        return self.element.cores[:1]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One frame (leading dim 1; padded to the batch where it is more than 1)."""
        if self.batch > 1:
            return self.run_frames([feeds])[0]
        return self._run(feeds)

    def run_frames(self, frames: Sequence[Mapping[str, np.ndarray]]
                   ) -> list[dict[str, np.ndarray]]:
        """1..batch frames in one session run (padded to the batch); their outputs, in order."""
        where = f"sub-network {self.subnet.name} on {self.element.name} (batch {self.batch})"
        outs = self._run(gather(frames, self.inputs, self.batch, where))
        wrong = [k for k, v in outs.items() if np.ndim(v) == 0 or np.shape(v)[0] != self.batch]
        if wrong:
            raise BackendError(f"{where}: output {wrong[0]!r} has shape "
                               f"{np.shape(outs[wrong[0]])}: it does not carry the batch")
        return split(outs, len(frames))

    def _run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            outs = self.session.run(self.outputs, {k: feeds[k] for k in self.inputs})
        except KeyError as e:
            raise BackendError(f"sub-network {self.subnet.name} on {self.element.name}: input "
                               f"{e.args[0]!r} was not given (needs {self.inputs})") from None
        except Exception as e:  # ORT raises its own exception types per status code
            msg = _first_line(e)
            raise BackendError(f"ort_cpu failed running {_blame(msg, self.subnet)}sub-network "
                               f"{self.subnet.name} on "
                               f"{self.element.name}: {msg}") from None
        return dict(zip(self.outputs, outs))

    def benchmark(self, feeds: Mapping[str, np.ndarray], repeats: int = 20,
                  warmup: int = 3) -> list[float]:
        """Seconds per run with inputs and preallocated outputs bound once (io_binding).

        `run` allocates every output and copies it into a new numpy array; inside a
        multi-layer stage ORT does neither (its arena reuses buffers), so a layer's time is
        measured without them. The profiler also takes off the cost of one call.
        """

        io = self.session.io_binding()
        ins = {k: np.ascontiguousarray(feeds[k]) for k in self.inputs}  # kept alive while bound
        for k, v in ins.items():
            io.bind_cpu_input(k, v)
        outs = self._run(ins)
        bound = [ort.OrtValue.ortvalue_from_numpy(outs[o]) for o in self.outputs]
        for name, value in zip(self.outputs, bound):
            io.bind_ortvalue_output(name, value)
        times = []
        for i in range(warmup + repeats):
            t0 = time.perf_counter()
            self.session.run_with_iobinding(io)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        return times

    def close(self) -> None:
        self.session = None


class OrtCpuBackend(Backend):
    name = "ort_cpu"
    kinds = ("cpu",)
    precisions = ("fp32", "int8")

    @classmethod
    def available(cls) -> tuple[bool, str]:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            return False, "onnxruntime is not installed"
        return True, ""

    def prepare(self, subnet: "Subnet", element: "ProcessingElement", *, spinning: bool = False,
                optimization: str = "all", profile_prefix: str | None = None,
                calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
                batch: int = 1, **_ignored: Any) -> OrtCpuRunner:
        """`spinning`: let idle pool threads spin (only when the stage owns its cores alone).
        `optimization`: 'disable' | 'basic' | 'extended' | 'all'. `calibration`: feeds that
        calibrate an int8 element's quantization (else random frames). `batch`: frames a
        run (see the module notes; `benchmark` then takes feeds of leading dim `batch`)."""

        if element.kind != "cpu":
            raise BackendError(f"ort_cpu runs on CPU elements, not on {element.name!r} "
                               f"({element.kind})")
        self.check_precision(subnet, element)
        if optimization not in _OPT_LEVELS:
            raise BackendError(f"ort_cpu: optimization {optimization!r} is not one of "
                               f"{', '.join(_OPT_LEVELS)}")
        batch = check_batch(batch, f"ort_cpu on {element.name}")
        if batch > 1 and element.precision == "int8":
            raise BackendError(f"ort_cpu: element {element.name!r} is int8; int8 sub-networks "
                               f"run at batch 1, not {batch}")
        subnet = batched_subnet(subnet, batch)
        so = session_options(element.cores, spinning, optimization, profile_prefix)
        try:
            if element.precision == "int8":
                model = str(int8_model_path(subnet, calibration))
            else:
                model, names, arrays = subnet.weightless()
                if names:  # the weights from memory, not serialised into the model's bytes
                    so.add_external_initializers(names, [ort.OrtValue.ortvalue_from_numpy(a)
                                                         for a in arrays])
            session = ort.InferenceSession(model, so,
                                           providers=["CPUExecutionProvider"],
                                           disabled_optimizers=DISABLED_OPTIMIZERS)
        except BackendError:
            raise
        except Exception as e:
            msg = _first_line(e)
            raise BackendError(f"ort_cpu cannot run {_blame(msg, subnet)}sub-network "
                               f"{subnet.name} on {element.name}: "
                               f"{msg}") from None
        return OrtCpuRunner(subnet, element, session, profiling=profile_prefix is not None,
                            batch=batch)

    def share_key(self, element: "ProcessingElement") -> tuple | None:
        if element.kind != "cpu" or len(element.cores) != 1:
            return None
        return ("ort_cpu", 1, element.precision)  # an int8 session is another session

    def prepare_like(self, runner: OrtCpuRunner, element: "ProcessingElement"
                     ) -> OrtCpuRunner | None:
        if (runner.session is None or self.share_key(element) is None
                or self.share_key(runner.element) != self.share_key(element) or runner.profiling):
            return None
        return OrtCpuRunner(runner.subnet, element, runner.session, batch=runner.batch)


register_backend(OrtCpuBackend.name, OrtCpuBackend)
