"""Import layer times measured elsewhere (a vendor profiler, another tool) as a hetflow Profile.

The table has one row per (layer, element) time:

    CSV:   a header with the columns layer, element, ms (in any order; others are ignored)
    JSON:  a list of {"layer": ..., "element": ..., "ms": ...} objects

`layer` is a hetflow layer name or an ONNX node name: a fused layer (Conv+BN+Relu) takes the
sum of its nodes' rows, so a per-node table fits a fused model. Several rows for the same layer
and element are repeated measurements: the profile keeps their median, p10 and p90.

Every name must match: a row naming a layer or node the model does not have, or an element the
platform does not have, refuses the whole table (naming them), as does an element with times
for some layers but not all. A platform element with no rows at all is left out of the profile
with a warning (the search then does not use it).
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np

from hetflow.errors import InputError
from hetflow.profile.estimate import DEFAULT_COMM
from hetflow.profile.measure import _element_info, _new_profile
from hetflow.profile.profile import Profile

if TYPE_CHECKING:
    from hetflow.model.graph import CnnGraph
    from hetflow.platform.spec import Platform

COLUMNS = ("layer", "element", "ms")


def _names(items: Iterable[str], limit: int = 5) -> str:
    items = list(dict.fromkeys(items))
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(repr(i) for i in items[:limit]) + more


def read_table(path: str | os.PathLike) -> list[tuple[str, str, float]]:
    """The rows of a CSV or JSON table as (layer, element, seconds)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    if path.suffix.lower() == ".json":
        try:
            records = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: bad JSON at line {e.lineno}") from None
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise InputError(f"{path}: expected a JSON list of {{\"layer\", \"element\", \"ms\"}} "
                             "objects")
        first_line = 1  # rows are reported by their index in the list
    else:
        reader = csv.DictReader(text.splitlines())
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"{path}: the CSV header has no column {', '.join(missing)} "
                             f"(expected {', '.join(COLUMNS)}; got {reader.fieldnames})")
        records = list(reader)
        first_line = 2  # after the header
    rows = []
    for i, r in enumerate(records, first_line):
        where = f"{path}: {'row' if path.suffix.lower() == '.json' else 'line'} {i}"
        missing = [c for c in COLUMNS if r.get(c) in (None, "")]
        if missing:
            raise InputError(f"{where}: no {', '.join(missing)}")
        try:
            ms = float(r["ms"])
        except (TypeError, ValueError):
            raise InputError(f"{where}: ms {r['ms']!r} is not a number") from None
        if not np.isfinite(ms) or ms < 0:
            raise InputError(f"{where}: ms {r['ms']!r} must be a finite time >= 0")
        rows.append((str(r["layer"]).strip(), str(r["element"]).strip(), ms / 1e3))
    if not rows:
        raise InputError(f"{path}: the table has no rows")
    return rows


def import_table(path: str | os.PathLike, graph: "CnnGraph", platform: "Platform",
                 elements: Iterable[str] | None = None) -> tuple[Profile, list[str]]:
    """A Profile for `graph` on `platform` from the table at `path`, and warnings.

    `elements`: the platform elements the profile is expected to cover (default: all); one of
    them without rows is a warning, not an error.
    """
    rows = read_table(path)
    layer_of = {l.name: l.name for l in graph.layers}
    nodes_of: dict[str, tuple[str, ...]] = {}
    for l in graph.layers:
        for n in l.nodes or (l.name,):
            layer_of.setdefault(n, l.name)
        nodes_of[l.name] = l.nodes or (l.name,)
    by_name = {e.name: e for e in platform.all_elements()}
    bad_layers = [r[0] for r in rows if r[0] not in layer_of]
    bad_elements = [r[1] for r in rows if r[1] not in by_name]
    if bad_layers or bad_elements:
        parts = []
        if bad_layers:
            parts.append(f"layers not in {graph.name} (neither hetflow layer nor ONNX node "
                         f"names): {_names(bad_layers)}")
        if bad_elements:
            parts.append(f"elements not in platform {platform.name}: {_names(bad_elements)} "
                         f"(it has {', '.join(by_name)})")
        raise InputError(f"{path}: {'; '.join(parts)}")

    # samples[element][layer][row name] -> times; a fused layer sums its nodes' medians
    samples: dict[str, dict[str, dict[str, list[float]]]] = {}
    for name, element, s in rows:
        per_layer = samples.setdefault(element, {}).setdefault(layer_of[name], {})
        per_layer.setdefault(name, []).append(s)

    prof = _new_profile(graph, platform, estimated=False)
    prof.meta.update(method="imported", table=str(path))
    warnings: list[str] = []
    for e, per_layer in samples.items():
        missing = [l.name for l in graph.layers if l.name not in per_layer]
        if missing:
            raise InputError(f"{path}: element {e} has no time for {len(missing)} of the "
                             f"{len(graph.layers)} layers of {graph.name}: {_names(missing)}")
        prof.layer_times[e] = {}
        partial = []
        for l in graph.layers:
            given = per_layer[l.name]
            # rows under the layer's own name and under its nodes' names are parts of its time
            if l.name not in given and len(given) < len(nodes_of[l.name]):
                partial.append(l.name)
            n = min(len(v) for v in given.values())
            sums = np.sum([np.percentile(v, (50, 10, 90)) for v in given.values()], axis=0)
            prof.layer_times[e][l.name] = {"median": float(sums[0]), "p10": float(sums[1]),
                                           "p90": float(sums[2]), "n": n}
        if partial:
            warnings.append(f"{path}: on {e}, fused layers {_names(partial)} have times for "
                            "only some of their ONNX nodes; their time is the sum of those")
        prof.elements[e] = _element_info(by_name[e], e, imported=str(path))
        prof.cpu_freq_mhz[e] = None
    untimed = [e for e in (elements if elements is not None else by_name) if e not in samples]
    if untimed:
        warnings.append(f"{path}: {len(untimed)} elements of platform {platform.name} have no "
                        f"times in the table: {', '.join(untimed)}; the profile leaves them "
                        "out, so no plan uses them")
    # the table has no link times: the platform's figures, else the estimator's guesses
    prof.comm = {**DEFAULT_COMM, **{k: dict(v) for k, v in platform.comm.items()}}
    prof.calibration = {"dvfs": False, "comm_source": {
        k: ("platform" if k in platform.comm else "default guess") for k in prof.comm}}
    prof.meta["warnings"] = warnings
    return prof, warnings
