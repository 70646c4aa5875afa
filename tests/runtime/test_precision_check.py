"""The reference check of a run at another precision than fp32: within a tolerance of the fp32
reference (model/accuracy.py), with the measured deviation reported either way; fp32 runs keep
the check to a few ulps."""
import numpy as np
import onnx
import pytest

from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.errors import RuntimeFault
from hetflow.model.accuracy import Tolerance
from hetflow.model.reader import load_model
from hetflow.model.synthetic import random_cnn_model
from hetflow.runtime.check import check_precision_run, reference_outputs
from hetflow.runtime.inputs import random_source


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(graph, app, source, the reference's outputs of frames 0..3)."""
    path = tmp_path_factory.mktemp("m") / "m.onnx"
    onnx.save(random_cnn_model(5, seed=2), path)
    graph = load_model(path)
    app = cnn_to_csdf(graph, {l.name: "cpu0" for l in graph.layers}, "paper")
    source = random_source(graph)
    return graph, app, source, reference_outputs(graph, range(4), source)


def scaled(outputs: dict, by: float) -> dict:
    """Each frame's outputs off the reference by `by` of their own norm (relative L2 = by)."""
    return {f: {t: (v * (1 + by)).astype(v.dtype) for t, v in out.items()}
            for f, out in outputs.items()}


def test_a_lower_precision_run_passes_within_the_tolerance_and_says_how_far_it_is(run):
    graph, app, source, ref = run
    worst, report = check_precision_run(graph, app, ["fp32", "int8"], scaled(ref, 0.01),
                                        source, Tolerance(rel_l2=0.02))
    assert report.passed and report.frames == 4
    for o in report.outputs:
        assert o.rel_l2_worst == pytest.approx(0.01, rel=1e-3)
    assert worst > 0


def test_a_lower_precision_run_outside_the_tolerance_fails_naming_precision_and_limit(run):
    graph, app, source, ref = run
    with pytest.raises(RuntimeFault, match=r"at int8 miss the tolerance .* rel_l2 0.03 > 0.02"):
        check_precision_run(graph, app, ["int8"], scaled(ref, 0.03), source,
                            Tolerance(rel_l2=0.02))


def test_an_fp32_run_keeps_the_tight_check_whatever_the_tolerance(run):
    graph, app, source, ref = run
    worst, report = check_precision_run(graph, app, ["fp32"], ref, source, Tolerance(rel_l2=0.5))
    assert worst == 0 and report.passed
    assert all(o.rel_l2_worst == 0 for o in report.outputs)
    with pytest.raises(RuntimeFault, match="differs from the reference run"):
        check_precision_run(graph, app, ["fp32"], scaled(ref, 0.01), source,
                            Tolerance(rel_l2=0.5))


def test_a_nan_fails_any_tolerance(run):
    graph, app, source, ref = run
    bad = scaled(ref, 0.0)
    first = next(iter(bad[0]))
    bad[0][first] = np.full_like(bad[0][first], np.nan)
    with pytest.raises(RuntimeFault, match="miss the tolerance"):
        check_precision_run(graph, app, ["fp16"], bad, source, Tolerance(rel_l2=1.0))
