"""How far the whole model on an element of another precision than fp32 is from the fp32
reference: measured once with the profile, so that a search offers only the precisions that
stay within the user's tolerance (`hetflow.model.accuracy`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable

from hetflow.backends.reuse import release, runners_for
from hetflow.errors import BackendError
from hetflow.model.accuracy import Tolerance, compare_runs, report_failures
from hetflow.platform.configs import distinct_elements
from hetflow.platform.precision import DEFAULT_PRECISION, GPU_PREFERENCE
from hetflow.platform.spec import ProcessingElement
from hetflow.runtime.check import reference_session
from hetflow.runtime.inputs import random_source

if TYPE_CHECKING:
    from hetflow.model.graph import CnnGraph
    from hetflow.profile.profile import Profile

DEVIATION_FRAMES = 8  # random frames per element; the run's own check covers its frames
META_KEY = "deviation"  # profile.meta[META_KEY][element] = AccuracyReport.to_dict()
SCREENED_KEY = "screened"  # profile.meta[SCREENED_KEY][element] = why it was not profiled


def whole_model_deviation(graph: "CnnGraph", element: ProcessingElement,
                          frames: int = DEVIATION_FRAMES) -> dict[str, Any]:
    """The whole model on `element` for `frames` random frames (the first frames a run fed by
    `random_source` checks) against ONNX Runtime's fp32 run of it: `AccuracyReport.to_dict()`
    (judged against the default tolerance; `deviation_failures` judges it against another)."""
    source = random_source(graph, pool=frames)
    feeds = [source(i) for i in range(frames)]
    names = list(graph.outputs)
    session = reference_session(graph)
    reference = [dict(zip(names, session.run(names, f))) for f in feeds]
    runner = runners_for(graph, [l.name for l in graph.layers], element,
                         name=f"{graph.name}[all]")[0]
    try:
        got = [runner.run(f) for f in feeds]
    finally:
        release([runner])
    report = compare_runs(got, reference, Tolerance(),
                          label=f"{graph.name} on {element.name}, {frames} random frames")
    return report.to_dict()


def record_deviations(profile: "Profile", graph: "CnnGraph",
                      elements: Iterable[ProcessingElement],
                      frames: int = DEVIATION_FRAMES) -> None:
    """Measure `whole_model_deviation` on one element of each group that runs alike (the same
    quantised model, the same kernels), for every measured element that is not fp32, into
    `profile.meta[META_KEY]` (those it holds already are kept)."""
    found = profile.meta.setdefault(META_KEY, {})
    others = [e for e in elements if e.precision != DEFAULT_PRECISION
              and e.name in profile.layer_times and e.name not in found]
    for rep, members in distinct_elements(others).items():
        record = whole_model_deviation(graph, rep, frames)
        found.update({e.name: record for e in members})


def deviation_failures(profile: "Profile", element: str, tolerance: Tolerance) -> list[str] | None:
    """Why `element`'s recorded deviation misses `tolerance` ([] when it passes); None when the
    profile holds no deviation for it (fp32, or an estimated profile)."""
    record = profile.meta.get(META_KEY, {}).get(element)
    return None if record is None else report_failures(record, tolerance)


def screen_gpu_precisions(graph: "CnnGraph", elements: Iterable[ProcessingElement],
                          tolerance: Tolerance,
                          deviation: Callable[..., dict[str, Any]] | None = None,
                          ) -> tuple[list[ProcessingElement], dict[str, str], dict[str, Any]]:
    """(the elements worth profiling, {element left out: why}, {element: deviation record})
    among `elements` under `--precision auto`: per GPU, its reduced precisions are checked in
    `GPU_PREFERENCE` order and the first within `tolerance` is kept, the others left out (a
    precision missing the tolerance is never offered; one after the kept one runs no faster).
    Every other element (fp32, CPU precisions) is kept. Profiling a GPU at four precisions
    took 60-100 s of a bench's 80 s on the H200 machine; at two, half that."""
    deviation = deviation or whole_model_deviation  # (the whole model on the element)
    elements = list(elements)
    by_gpu: dict[str, dict[str, ProcessingElement]] = {}
    for e in elements:
        if e.kind == "gpu" and e.precision in GPU_PREFERENCE:
            by_gpu.setdefault(e.base_name, {})[e.precision] = e
    left_out: dict[str, str] = {}
    records: dict[str, Any] = {}
    for gpu, at in by_gpu.items():
        kept = None
        for precision in (p for p in GPU_PREFERENCE if p in at):
            e = at[precision]
            if kept is not None:
                left_out[e.name] = (f"not profiled: {kept.name} is within the tolerance and "
                                    f"runs at least as fast")
                continue
            try:
                records[e.name] = deviation(graph, e)
            except BackendError:  # not runnable here: left to the profile to skip or refuse
                continue
            failures = report_failures(records[e.name], tolerance)
            if failures:
                left_out[e.name] = "misses the tolerance: " + "; ".join(failures)
            else:
                kept = e
    return [e for e in elements if e.name not in left_out], left_out, records


def record_screen(profile: "Profile", left_out: dict[str, str], records: dict[str, Any]) -> None:
    """Keep a `screen_gpu_precisions` in `profile.meta`: the deviations it measured, and the
    elements it left out with why (what a later reuse of the profile checks)."""
    profile.meta.setdefault(META_KEY, {}).update(records)
    if left_out:
        profile.meta[SCREENED_KEY] = dict(left_out)
