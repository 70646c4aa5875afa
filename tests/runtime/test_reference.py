"""The CPU backend must agree with the unoptimised reference even where ORT's own graph
rewrites are wrong (Pad_Fusion folds Pad(0) into MaxPool: tiny_yolo_v2)."""
import numpy as np

from hetflow.backends import backend_for
from hetflow.model import resolve_model
from hetflow.model.subnet import extract_subnet
from hetflow.platform.spec import ProcessingElement
from hetflow.runtime.check import reference_session
from hetflow.runtime.inputs import random_source


def test_tiny_yolo_v2_matches_reference():
    graph = resolve_model("tiny_yolo_v2")
    sub = extract_subnet(graph, [l.name for l in graph.layers])
    runner = backend_for(ProcessingElement("cpu0", "cpu", (0,))).prepare(sub, ProcessingElement("cpu0", "cpu", (0,)))
    x = random_source(graph)(0)
    got = runner.run(x)["output"]
    want = reference_session(graph).run(["output"], x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
