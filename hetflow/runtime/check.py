"""The reference check: pipelined outputs against a run of the whole model on one backend."""
from __future__ import annotations

from typing import Callable

import numpy as np

from hetflow.dataflow.csdf import CsdfApp
from hetflow.errors import RuntimeFault
from hetflow.model.graph import CnnGraph

RTOL, ATOL = 1e-3, 1e-4  # float32 with different kernel orders (and TF32-free GPU math)
ULPS = 4  # half-precision outputs: a few rounding steps, relative to the output's magnitude


def tolerances(dtype) -> tuple[float, float]:
    """(rtol, atol) of the check for outputs of `dtype`, both relative to the output's largest
    magnitude: float32's fixed pair; for fp16 and bf16, ULPS units of their precision (a stage
    split changes where intermediate results are rounded: one fp16 step is 4.9e-4 at 0.5-1)."""
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    eps = {"float16": float(np.finfo(np.float16).eps), "bfloat16": 2.0 ** -7}.get(name)
    return (RTOL, ATOL) if eps is None else (ULPS * eps, ULPS * eps)


def reference_session(graph: CnnGraph):
    import onnxruntime as ort

    # the reference runs unoptimised: no graph rewrite of ORT's can make it wrong
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(graph.onnx.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def check_outputs(graph: CnnGraph, app: CsdfApp, kept: dict[int, dict[str, np.ndarray]],
                  inputs: Callable[[int], dict], session=None) -> float:
    """Compare every kept frame with the reference; raise RuntimeFault naming the stage that
    produced a mismatching output. Returns the largest absolute error seen."""
    sess = session or reference_session(graph)
    names = list(graph.outputs)
    worst = 0.0
    for f in sorted(kept):
        ref = dict(zip(names, sess.run(names, inputs(f))))
        for t in names:
            got, want = np.asarray(kept[f][t]), ref[t]
            if got.shape != want.shape:
                raise RuntimeFault(f"frame {f}: output {t!r} has shape {got.shape}, reference "
                                   f"{want.shape} (produced by stage {app.model_outputs[t]})")
            err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) \
                if got.size else 0.0
            worst = max(worst, err)
            # tolerances relative to the output's magnitude: random-weight CNNs reach outputs
            # of several hundred, where float32 summation order alone moves values by ~1e-4
            scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
            rtol, atol = tolerances(want.dtype)
            g, w = got.astype(np.float64) / scale, want.astype(np.float64) / scale
            if not np.allclose(g, w, rtol=rtol, atol=atol):
                actor = app.model_outputs[t]
                ph = next(p for p in app.phases[actor] if t in p.outputs)
                raise RuntimeFault(
                    f"frame {f}: output {t!r} ({want.dtype}) differs from the reference run "
                    f"(max abs error {err:.3g}, tolerance {atol:.2g} x {scale:.3g}); produced by "
                    f"stage {actor} phase {ph.index} (layers {ph.layers[0]}..{ph.layers[-1]})")
    return worst
