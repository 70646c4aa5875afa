"""The reference check's tolerance follows the output's dtype: one fp16 rounding step passes for
an fp16 output and fails for a float32 one; a real mismatch fails for both, naming the stage."""
import numpy as np
import pytest

from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.errors import RuntimeFault
from hetflow.model.synthetic import random_cnn_graph
from hetflow.runtime.check import check_outputs, tolerances


class _Reference:
    def __init__(self, outputs):
        self.outputs = outputs

    def run(self, names, feeds):
        return [self.outputs[n] for n in names]


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_one_fp16_rounding_step_passes_for_fp16_only(dtype):
    graph = random_cnn_graph(6, 1)
    app = cnn_to_csdf(graph, {l.name: "pe0" for l in graph.layers})
    rng = np.random.default_rng(0)
    want = {t: rng.uniform(0.02, 0.06, graph.tensors[t].shape).astype(dtype) for t in graph.outputs}
    step = {t: (w.astype(np.float64) + 0.000488).astype(dtype) for t, w in want.items()}
    ref = _Reference(want)
    if dtype == np.float16:
        err = check_outputs(graph, app, {0: step}, lambda f: {}, session=ref)
        assert 3e-4 < err < 1e-3
    else:
        with pytest.raises(RuntimeFault, match=r"\(float32\) differs from the reference run "
                                                r"\(max abs error 0.000488"):
            check_outputs(graph, app, {0: step}, lambda f: {}, session=ref)
    wrong = {t: (w.astype(np.float64) + 0.1).astype(dtype) for t, w in want.items()}
    with pytest.raises(RuntimeFault, match="produced by stage pe0"):
        check_outputs(graph, app, {0: wrong}, lambda f: {}, session=ref)


def test_tolerances_by_dtype():
    assert tolerances(np.float32) == (1e-3, 1e-4)
    assert tolerances(np.float16)[1] == pytest.approx(4 * 2 ** -10)
    assert tolerances("bfloat16")[1] == pytest.approx(4 * 2 ** -7)
