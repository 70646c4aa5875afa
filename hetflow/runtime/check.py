"""The reference check: pipelined outputs against a run of the whole model on one backend."""
from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from hetflow.dataflow.csdf import CsdfApp
from hetflow.errors import RuntimeFault
from hetflow.model.accuracy import AccuracyReport, Tolerance, compare_runs
from hetflow.model.graph import CnnGraph
from hetflow.platform.precision import DEFAULT_PRECISION
import onnxruntime as ort
from hetflow.model.subnet import weightless_model

RTOL, ATOL = 1e-3, 1e-4  # float32 with different kernel orders (and TF32-free GPU math)
# Tolerances from the output's dtype, both relative to the output's magnitude (see below).
# float32 as measured before; float16/bfloat16 a few units of the dtype's last place: a split
# stage or another backend sums in another order and rounds each output once more, so outputs
# differ by one or two rounding steps, and a random-weight CNN amplifies that a little.
_EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
ULPS = 8


def tolerance(dtype: str) -> tuple[float, float]:
    """(rtol, atol) for an output of `dtype`; integers and bools must match exactly."""
    if dtype in _EPS:
        return ULPS * _EPS[dtype], ULPS / 2 * _EPS[dtype]
    if dtype.startswith(("int", "uint", "bool")):
        return 0.0, 0.0
    return RTOL, ATOL


def compare(got: np.ndarray, want: np.ndarray, dtype: str) -> tuple[bool, float, float]:
    """(within tolerance, max abs error, allowed abs error at the worst element)."""
    rtol, atol = tolerance(dtype)
    if not got.size:
        return True, 0.0, 0.0
    # in float64: float16 differences of large values overflow, and bfloat16 arrives as such
    g, w = got.astype(np.float64), want.astype(np.float64)
    # tolerances relative to the output's magnitude: random-weight CNNs reach outputs
    # of several hundred, where float32 summation order alone moves values by ~1e-4
    scale = max(1.0, float(np.max(np.abs(w))))
    diff = np.abs(g - w)
    allowed = scale * atol + rtol * np.abs(w)
    ok = bool(np.all(diff <= allowed))  # a NaN fails
    worst = int(np.argmax(diff - allowed))
    return ok, float(np.max(diff)), float(allowed.flat[worst])


def reference_session(graph: CnnGraph):
    """ONNX Runtime's session of the whole model, unoptimised (no graph rewrite of ORT's can make
    it wrong), built once per graph: a bench checks every plan it runs against it, and building
    it took seconds for vgg19 (its 548 MB of weights serialised and parsed back, before they
    were taken from memory)."""


    session = graph.__dict__.get("_reference_session")  # cached like the graph's derived views
    if session is not None:
        return session
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    # a split graph (hetflow.model.split) is checked against its model before the split
    model, names, arrays = weightless_model(getattr(graph, "reference_onnx", None) or graph.onnx)
    if names:
        so.add_external_initializers(names, [ort.OrtValue.ortvalue_from_numpy(a) for a in arrays])
    session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    graph.__dict__["_reference_session"] = session
    return session


def reference_outputs(graph: CnnGraph, frames, inputs: Callable[[int], dict],
                      session=None) -> dict[int, dict[str, np.ndarray]]:
    """The reference run's outputs of each of `frames`."""
    sess = session or reference_session(graph)
    names = list(graph.outputs)
    return {f: dict(zip(names, sess.run(names, inputs(f)))) for f in sorted(frames)}


def check_precision_run(graph: CnnGraph, app: CsdfApp, precisions: Iterable[str],
                        kept: dict[int, dict[str, np.ndarray]], inputs: Callable[[int], dict],
                        tolerance: Tolerance | None = None, session=None,
                        label: str = "") -> tuple[float, AccuracyReport]:
    """The reference check of a run whose elements compute in `precisions`: an all-fp32 run
    as `check_outputs` checks it (a few ulps), any other against `tolerance`
    (`model.accuracy.compare_runs`), RuntimeFault naming the precisions and the limits missed.
    Returns the largest absolute error and the run's deviation over the kept frames either way."""
    tolerance = tolerance or Tolerance()
    refs = reference_outputs(graph, kept, inputs, session)
    report = compare_runs([kept[f] for f in refs], list(refs.values()), tolerance, label)
    lowered = sorted(set(precisions) - {DEFAULT_PRECISION})
    if not lowered:
        return check_outputs(graph, app, kept, inputs, reference=refs), report
    if not report.passed:
        missed = "; ".join(f"{o.name}: {', '.join(o.failures)}" for o in report.outputs
                           if o.failures)
        raise RuntimeFault(f"outputs of the run at {', '.join(lowered)} miss the tolerance "
                           f"against the fp32 reference over {report.frames} frames: {missed}")
    return max((o.max_abs_worst for o in report.outputs), default=0.0), report


def check_outputs(graph: CnnGraph, app: CsdfApp, kept: dict[int, dict[str, np.ndarray]],
                  inputs: Callable[[int], dict], session=None,
                  reference: dict[int, dict[str, np.ndarray]] | None = None) -> float:
    """Compare every kept frame with the reference (`reference`: its outputs, already run);
    raise RuntimeFault naming the stage that produced a mismatching output, the error found
    and the tolerance of the output's dtype. Returns the largest absolute error seen."""
    names = list(graph.outputs)
    refs = reference or reference_outputs(graph, kept, inputs, session)
    worst = 0.0
    for f in sorted(kept):
        ref = refs[f]
        for t in names:
            got, want = np.asarray(kept[f][t]), ref[t]
            if got.shape != want.shape:
                raise RuntimeFault(f"frame {f}: output {t!r} has shape {got.shape}, reference "
                                   f"{want.shape} (produced by stage {app.model_outputs[t]})")
            info = graph.tensors.get(t)
            dtype = info.dtype if info is not None else str(want.dtype)
            ok, err, allowed = compare(got, want, dtype)
            worst = max(worst, err)
            if not ok:
                actor = app.model_outputs[t]
                ph = next(p for p in app.phases[actor] if t in p.outputs)
                rtol, atol = tolerance(dtype)
                raise RuntimeFault(
                    f"frame {f}: output {t!r} differs from the reference run (max abs error "
                    f"{err:.3g}, {allowed:.3g} allowed there for {dtype}: rtol {rtol:.3g}, atol "
                    f"{atol:.3g} x max(1, max |output|)); produced by stage {actor} phase "
                    f"{ph.index} (layers {ph.layers[0]}..{ph.layers[-1]})")
    return worst
