"""Carballo-Hernandez et al. (2023): split one heavy layer across elements by geometric
programming.

`search` places the model with a base strategy (`pipeline`), then splits the chosen layer by
the GP's fractions (`hetflow.model.split`: parts over slices of the output channels and a
Concat, ordinary layers of a rewritten model) and maps part i to its element; the result is a
design over the split model (`SearchResult.problem`, `.splits`), which the plan records and the
runtime rebuilds. With apply="auto" the split is kept where the cost model predicts it faster
than the base mapping; the fractions, part sizes and predicted times are in `notes` either way.

The layer (the heaviest convolution by FLOPs, or `layer=`) is split by output channels, or with
axis="rows" (a 2-D Conv) by output rows: element e computes a fraction x_e of them, sum x_e = 1.
Its time is a posynomial t_e(x) = a_e x^b_e + c_e:
- a_e, b_e from the profile. The profile holds one point per element (the whole layer), so the
  model is linear in x (b_e = 1, a_e = that time) - an assumption: small parts run less
  efficiently on wide devices. `samples={element: [(fraction, seconds), ...]}` fits a_e, b_e, c_e
  to measured parts instead (scipy curve_fit, a, b > 0, c >= 0).
- c_e: one more backend call (call overhead + element overhead) and, away from the element the
  mapping runs the layer on ("home"), moving the input there and the part of the output back
  (the transfer model, taken as affine in bytes: its fixed part into c_e, its per-byte part
  times x into a_e). A channel part reads the whole input (its bytes in c_e); a row part reads
  its share of the input rows, sliced at home (its bytes times x in a_e; the halo rows a part
  reads beyond its share, and the part's own time, are taken as linear in x too).
The objective is the split layer's time, max_e t_e(x_e), with an epigraph variable T:
minimise T subject to t_e(x_e) / T <= 1. The equality sum x_e = 1 is a posynomial equality,
which GP does not allow; as in the paper it is *condensed* at a point x^ into the monomial
h(x) = prod_e (x_e / eps_e)^eps_e, eps_e = x^_e / sum x^ (h <= sum x by the AM-GM inequality).
`method="penalty"` (the paper's): minimise T + alpha / h(x) with sum x <= 1, doubling alpha
(*tightening*) until sum x >= 1 - tol, then re-condensing at the solution until it settles.
`method="condensation"` (default): the constraint 1 / h(x) <= 1 (so sum x >= h >= 1), re-condensed
at each solution (successive GP, Avriel and Williams' condensation); every iterate is feasible,
the objective never rises, and minimising T pushes sum x down to 1 at the fixed point, which is
the optimum of the original problem. The final fractions are normalised to sum exactly 1.
GP forces every x_e > 0, so an element whose fixed cost c_e exceeds the best split time would
still be charged; splits over the k fastest elements, k = 1..n, are solved and the best kept.
FPGA-like budgets: an element with `resources` {name: budget} gets the paper's resource
constraints use_r * x_e <= budget_r, with use_r from `resource_use` {name: amount for the whole
layer}, or the layer's weight bytes for "param_bytes"/"memory_bytes" and its FLOPs for "flops".
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from hetflow.errors import InfeasibleError, InputError

from hetflow.plan.mapping import group_members
from hetflow.mapping.problem import Problem
from hetflow.mapping.strategies.base import SearchResult, configurations
from dataclasses import replace
from hetflow.mapping.strategies.base import get_strategy
from hetflow.model.split import (
    AXES,
    LayerSplit,
    apply_splits,
    check_split,
    concat_name,
    slice_name,
    split_size,
)
from hetflow.plan.mapping import Mapping


@dataclass
class PartModel:
    """t(x) = a * x**b + d * x + c for a fraction x of the layer's output channels (d: the
    per-byte part of sending the output back, kept apart when b != 1)."""

    a: float
    b: float
    c: float
    fitted: bool  # from samples (else: linear from the profile's one point)
    d: float = 0.0

    def __call__(self, x: float) -> float:
        return self.a * x ** self.b + self.d * x + self.c


def heaviest_conv(problem: Problem) -> str:
    convs = [l for l in problem.graph.layers if l.op_type.split("+")[0] == "Conv"]
    if not convs:
        raise InputError("gp: the model has no Conv layer to split (give layer=...)")
    return max(convs, key=lambda l: (l.flops or 0, l.name)).name


def _affine_transfer(problem: Problem, nbytes: int, src: str, dst: str) -> tuple[float, float]:
    """(fixed seconds, seconds per byte) of the transfer model between two elements."""
    if src == dst or nbytes <= 0:
        return 0.0, 0.0
    fixed = problem.transfer(0, src, dst)
    per_byte = max(0.0, (problem.transfer(nbytes, src, dst) - fixed) / nbytes)
    return max(0.0, fixed), per_byte


def part_models(problem: Problem, layer: str, elements: list[str], home: str,
                samples: dict[str, list[tuple[float, float]]] | None = None,
                axis: str = "channels") -> dict[str, PartModel]:
    g = problem.graph
    lay = g.layer(layer)
    in_bytes = sum(g.tensors[t].nbytes for t in lay.inputs)
    out_bytes = sum(g.tensors[t].nbytes for t in lay.outputs)
    models = {}
    for e in elements:
        call = problem.call_overhead + problem.element_overhead.get(e, 0.0)
        fixed_in, byte_in = _affine_transfer(problem, in_bytes, home, e)
        fixed_out, byte_out = _affine_transfer(problem, out_bytes, e, home)
        comm_a, comm_c = byte_out * out_bytes, fixed_in + byte_in * in_bytes + fixed_out
        if axis == "rows":  # a row part reads its share of the input rows
            comm_a, comm_c = comm_a + byte_in * in_bytes, fixed_in + fixed_out
        if samples and e in samples:
            a, b, c = _fit(samples[e], e)
            models[e] = PartModel(a, b, c + call + comm_c, True, comm_a)
        else:
            t = float(problem.layer_times[g.layer_index[layer], problem.element_index[e]])
            models[e] = PartModel(t + comm_a, 1.0, call + comm_c, False)
    return models


def _fit(points: list[tuple[float, float]], element: str) -> tuple[float, float, float]:
    from scipy.optimize import curve_fit

    pts = np.array(points, float)
    if pts.ndim != 2 or pts.shape[1] != 2 or len(pts) < 3 or (pts[:, 0] <= 0).any():
        raise InputError(f"gp: samples for {element!r} need >= 3 (fraction > 0, seconds) pairs")
    scale = pts[:, 1].max()  # fit in units of the largest time: well-conditioned
    (a, b, c), _ = curve_fit(lambda x, a, b, c: a * x ** b + c, pts[:, 0], pts[:, 1] / scale,
                             p0=(1.0, 1.0, 0.0), bounds=([1e-9, 0.05, 0.0], [np.inf, 4.0, np.inf]),
                             maxfev=20000, xtol=1e-12, ftol=1e-12)
    return float(a * scale), float(b), float(c * scale)


def _budgets(problem: Problem, layer: str, elements: list[str],
             resource_use: dict[str, float] | None) -> tuple[dict[str, dict[str, float]], list]:
    """{element: {resource: max fraction}} from the paper's resource constraints."""
    lay = problem.graph.layer(layer)
    implied = {"param_bytes": lay.param_bytes, "memory_bytes": lay.param_bytes,
               "flops": lay.flops or 0}
    caps, skipped = {}, []
    for e in elements:
        for res, budget in problem.element(e).resources.items():
            use = (resource_use or {}).get(res, implied.get(res))
            if use is None:
                skipped.append(f"{e}.{res}: no resource_use given")
                continue
            if use > 0:
                caps.setdefault(e, {})[res] = budget / use
    return caps, skipped


def _import_cvxpy():
    """cvxpy looks for its solvers by importing them, highspy among them, whose libhighs has the
    same soname as the one OR-Tools bundles: whichever loads first serves both, and CP-SAT
    (`ilp`) then fails to load. Loading OR-Tools first keeps both usable (cvxpy's GP solvers
    do not need HiGHS)."""
    try:
        from ortools.sat.python import cp_model  # noqa: F401
    except ImportError:
        pass
    try:
        import cvxpy
    except ImportError:
        raise InputError("gp: the geometric program needs cvxpy, which is not installed "
                         "(pip install 'hetflow[search]')") from None
    return cvxpy


def solve_split(models: dict[str, PartModel], caps: dict[str, dict[str, float]] | None = None,
                method: str = "condensation", tol: float = 1e-4, max_iter: int = 50
                ) -> tuple[dict[str, float], float, dict]:
    """Fractions minimising max_e t_e(x_e) with sum x_e = 1, over all the given elements."""
    cp = _import_cvxpy()

    names = list(models)
    n = len(names)
    if n == 1:
        cap = min((caps or {}).get(names[0], {}).values(), default=np.inf)
        if cap < 1 - tol:
            raise InfeasibleError(f"gp: {names[0]} alone cannot hold the whole layer "
                                  f"(its resources allow {cap:.3f} of it)")
        return {names[0]: 1.0}, models[names[0]](1.0), {"iterations": 0}
    x = cp.Variable(n, pos=True)
    T = cp.Variable(pos=True)
    cons = []
    for i, e in enumerate(names):
        m = models[e]
        t = m.a * x[i] ** m.b + (m.d * x[i] if m.d > 0 else 0)
        cons.append((t + m.c) / T <= 1 if m.c > 0 else t / T <= 1)
        for cap in (caps or {}).get(e, {}).values():
            cons.append(x[i] <= cap)
    point = np.full(n, 1.0 / n)
    info: dict = {"method": method, "iterations": 0}
    alpha = None
    for it in range(max_iter):
        w = point / point.sum()  # condensation weights eps_e (constants: rebuilt each time)
        h = cp.prod(cp.hstack([(x[i] / w[i]) ** float(w[i]) for i in range(n)]))
        if method == "condensation":  # sum x >= 1 through its condensed monomial
            prob = cp.Problem(cp.Minimize(T), cons + [h ** -1 <= 1])
            _solve(prob)
        elif method == "penalty":
            alpha = alpha or 1e-3 * max(m(1.0) for m in models.values())
            while True:  # tightening: the first alpha that meets the equality
                a = cp.Parameter(pos=True, value=alpha)
                prob = cp.Problem(cp.Minimize(T + a * h ** -1), cons + [cp.sum(x) <= 1])
                _solve(prob)
                if x.value.sum() >= 1 - tol or alpha > 1e12:
                    break
                alpha *= 2
        else:
            raise InputError(f"gp: unknown method {method!r} (use 'condensation' or 'penalty')")
        info["iterations"] = it + 1
        new = np.maximum(np.asarray(x.value, float), 1e-12)
        moved = np.abs(new / new.sum() - point / point.sum()).max()
        point = new
        if moved < tol:
            break
    fractions = point / point.sum()
    info["alpha"] = alpha
    info["sum_before_normalising"] = float(point.sum())
    split_time = max(models[e](float(f)) for e, f in zip(names, fractions))
    return dict(zip(names, map(float, fractions))), split_time, info


def _solve(prob) -> None:
    try:
        prob.solve(gp=True)
    except Exception as err:  # solver failure: say which model, not a deep traceback
        raise InfeasibleError(f"gp: the geometric program could not be solved ({err})") from None
    if prob.status not in ("optimal", "optimal_inaccurate"):
        raise InfeasibleError(f"gp: the geometric program is {prob.status}")


def channel_split(fractions: dict[str, float], channels: int) -> dict[str, int]:
    """Whole output channels (or rows) per element (largest remainder)."""
    raw = {e: f * channels for e, f in fractions.items()}
    counts = {e: int(np.floor(v)) for e, v in raw.items()}
    short = channels - sum(counts.values())
    for e in sorted(raw, key=lambda e: raw[e] - counts[e], reverse=True)[:short]:
        counts[e] += 1
    return counts


CONCAT_BYTES_PER_S = 5e9  # the Concat of a split layer, not profiled: a copy of its output


def split_problem(problem: Problem, split) -> Problem:
    """`problem` over its model with `split` applied. A part computing a share of the layer's
    output channels (rows) is predicted at that share of the layer's profiled time on each
    element (time linear in output channels or rows: the part models' own assumption where no
    samples were measured); the Concat at a copy of the layer's output at CONCAT_BYTES_PER_S,
    and a row part's Slice at a copy of the rows it cuts."""


    g = problem.graph
    fused = any(len(l.nodes) > 1 for l in g.layers)
    g2 = apply_splits(g, [split], fused)
    total = sum(split.sizes)
    slices = {slice_name(split.layer, i) for i in range(len(split.sizes))}
    rows = []
    for lay in g2.layers:
        if lay.name in g.layer_index:
            rows.append(problem.layer_times[g.layer_index[lay.name]])
        elif lay.name == concat_name(split.layer) or lay.name in slices:
            row = problem.layer_times[g.layer_index[split.layer]]
            out = g2.tensors[lay.outputs[0]].nbytes / CONCAT_BYTES_PER_S
            rows.append(np.where(np.isfinite(row), out, np.inf))
        else:  # "<node>/part<i>": part i of one of the split layer's nodes
            node, _, i = lay.name.rpartition("/part")
            src = split.layer if node not in g.layer_index else node
            rows.append(problem.layer_times[g.layer_index[src]] * split.sizes[int(i)] / total)
    return replace(problem, graph=g2, layer_times=np.array(rows, float))


def _apply_split(problem: Problem, base_mapping, layer: str, sizes: dict[str, int],
                 home_actor: str, axis: str = "channels"):
    """(split problem, mapping, split) with part i of `layer` on the i-th element of `sizes`
    (elements given no channel or row left out), and the Concat and a row split's Slices on
    the layer's own actor (the input arrives there; each part is sent only its rows)."""


    used = [e for e, c in sizes.items() if c > 0]
    split = LayerSplit(layer, tuple(sizes[e] for e in used), axis)
    home = {concat_name(layer)} | {slice_name(layer, i) for i in range(len(used))}
    sp = split_problem(problem, split)
    assignment = {}
    for lay in sp.graph.layers:
        if lay.name in base_mapping.assignment:
            assignment[lay.name] = base_mapping.assignment[lay.name]
        elif lay.name in home:
            assignment[lay.name] = home_actor
        else:
            assignment[lay.name] = used[int(lay.name.rpartition("/part")[2])]
    return sp, Mapping(assignment, base_mapping.policy, dispatch_mode=base_mapping.dispatch_mode,
                       lanes=dict(base_mapping.lanes)), split


def search(problem: Problem, seed: int = 0, layer: str | None = None,
           elements: list[str] | None = None, samples: dict | None = None,
           resource_use: dict[str, float] | None = None, method: str = "condensation",
           base: str = "pipeline", apply: str = "auto", axis: str = "channels",
           **options) -> SearchResult:
    """The base strategy's mapping with one layer split by GP across elements.

    apply: "auto" keeps the split where the cost model predicts it faster than the base
    mapping, "always" keeps it, "never" only recommends it (in `notes`).
    axis: "channels" splits the layer's output channels, "rows" (a 2-D Conv, grouped and
    depthwise ones too) its output rows."""


    t0 = time.perf_counter()
    layer = layer or heaviest_conv(problem)
    if layer not in problem.layer_index:
        raise InputError(f"gp: layer {layer!r} is not in the model")
    if apply not in ("auto", "always", "never"):
        raise InputError(f"gp: apply={apply!r}: use auto, always or never")
    if axis not in AXES:
        raise InputError(f"gp: axis={axis!r}: use {' or '.join(AXES)}")
    total = split_size(problem.graph, layer, axis)
    if axis == "rows":  # a layer that rows cannot split (a Gemm, a 1-D Conv) is refused here
        check_split(problem.graph, LayerSplit(layer, (1, total - 1), axis))
    based = get_strategy(base)(problem, seed=seed, **options)
    mapping = based.best
    home = group_members(mapping.assignment[layer])[0]
    split_base = mapping  # the design the split layer's parts are added to
    if elements is None:
        used = set(mapping.elements)
        elements = next((c for c in configurations(problem) if used <= set(c)), mapping.elements)
        # a member of a replica group takes whole frames; it cannot also take a part of one
        grouped = {e for a in mapping.actors if "|" in a for e in group_members(a)}
        free = [e for e in elements if e not in grouped]
        if len(free) < 2:  # the base replicates over (nearly) everything: split beside the
            from hetflow.mapping.strategies.base import whole_model_on  # model run on the layer's home element instead

            split_base, free = whole_model_on(problem, home), list(elements)
        elements = free
    for e in elements:
        problem.element(e)
    models = part_models(problem, layer, list(elements), home, samples, axis)
    caps, skipped = _budgets(problem, layer, list(elements), resource_use)
    # k fastest elements (by time of the whole layer), k = 1..n: GP charges every member
    ranked = sorted(elements, key=lambda e: models[e](1.0))
    best = None
    for k in range(1, len(ranked) + 1):
        subset = ranked[:k]
        try:
            fr, t, info = solve_split({e: models[e] for e in subset}, caps, method)
        except InfeasibleError:
            continue
        if best is None or t < best[1] - 1e-15:
            best = (fr, t, info)
    if best is None:
        raise InfeasibleError(f"gp: no split of {layer!r} fits the elements' resources")
    fractions, split_time, info = best
    unsplit = min(models[e](1.0) for e in elements)
    per_element = channel_split(fractions, total)
    notes = {
        "layer": layer, "home": home, "fractions": fractions, "axis": axis,
        axis: per_element, "split_time_s": split_time,
        "unsplit_time_s": unsplit, "speedup": unsplit / split_time if split_time > 0 else None,
        "models": {e: {"a": m.a, "b": m.b, "c": m.c, "fitted": m.fitted}
                   for e, m in models.items()},
        "linear_assumption": [e for e, m in models.items() if not m.fitted],
        "resources_skipped": skipped, "solver": info,
        "base_strategy": base, "base_throughput": based.metrics.throughput,
    }
    if apply != "never" and sum(1 for c in per_element.values() if c > 0) >= 2:
        from hetflow.mapping.problem import evaluate

        sp, split_mapping, split = _apply_split(problem, split_base, layer, per_element,
                                                split_base.assignment[layer], axis)
        metrics = evaluate(sp, split_mapping)
        notes["split_throughput"] = metrics.throughput
        if apply == "always" or metrics.throughput > based.metrics.throughput:
            notes["applied"] = f"{layer!r} split as {dict(zip(per_element, split.sizes))}"
            notes["keep_design"] = apply == "always"
            return SearchResult(split_mapping, metrics, [], based.evaluations,
                                time.perf_counter() - t0, None, notes, sp, [split])
        notes["applied"] = (f"no: the split was predicted at {metrics.throughput:.1f} frames/s, "
                            f"the {base} mapping at {based.metrics.throughput:.1f}")
    else:
        notes["applied"] = "no" + (" (apply=never)" if apply == "never" else
                                   ": the best split uses one element")
    return SearchResult(mapping, based.metrics, [], based.evaluations, time.perf_counter() - t0,
                        None, notes)


__all__ = ["search", "solve_split", "part_models", "heaviest_conv", "channel_split", "PartModel"]


search.passes_options_to_base = True  # the rest of its options go to its base strategy
