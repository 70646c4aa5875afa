"""Profiles from per-layer times measured elsewhere (a Jetson, a phone, a vendor profiler).

A table is CSV with a header row naming the columns `layer`, `element` and `ms` (also
`milliseconds` or `time_ms`), or JSON: a list of such objects, or {element: {layer: ms}}. A
layer is named as hetflow names it (`hetflow inspect`) or by its ONNX node name; the times of the
nodes that hetflow fuses into one layer (Conv + BatchNormalization + Relu) add up, and all of
them must be given. Elements are the platform's. Every name that matches nothing is an error
listing those names; a platform element without times is kept out of the profile with a
warning (the search then cannot use it). Links between elements take the platform's `comm`
figures where it has them, else the estimator's guesses (said in `calibration.comm_source`).
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from hetflow.errors import InputError

from .estimate import DEFAULT_COMM
from .measure import _element_info, _new_profile
from .profile import Profile

if TYPE_CHECKING:
    from hetflow.model.graph import CnnGraph
    from hetflow.platform.spec import Platform

TIME_COLUMNS = ("ms", "milliseconds", "time_ms")


def _some(names, n: int = 5) -> str:
    names = sorted(names)
    return ", ".join(repr(x) for x in names[:n]) + (f" and {len(names) - n} more"
                                                    if len(names) > n else "")


def read_table(path: str | Path) -> list[tuple[str, str, float]]:
    """(layer, element, milliseconds) rows of a CSV or JSON table; InputError naming the file
    and the row for anything malformed."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    if path.suffix.lower() == ".json" or text.lstrip().startswith(("[", "{")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: not JSON (line {e.lineno}: {e.msg})") from None
        if isinstance(data, dict):
            rows = [{"element": e, "layer": l, "ms": v} for e, per in data.items()
                    if isinstance(per, dict) for l, v in per.items()]
            if len(rows) != sum(len(v) if isinstance(v, dict) else 1 for v in data.values()):
                raise InputError(f"{path}: a JSON object must map each element to "
                                 "{layer: milliseconds}")
        elif isinstance(data, list):
            rows = data
        else:
            raise InputError(f"{path}: a JSON table is a list of rows or {{element: {{layer: ms}}}}")
        where = "row"
    else:
        rows = list(csv.DictReader(io.StringIO(text)))
        where = "line"
    out = []
    for i, row in enumerate(rows):
        at = f"{path}: {where} {i + 2 if where == 'line' else i + 1}"
        if not isinstance(row, dict):
            raise InputError(f"{at}: not an object with layer, element and ms")
        row = {str(k).strip().lower(): v for k, v in row.items() if k is not None}
        col = next((c for c in TIME_COLUMNS if c in row), None)
        if "layer" not in row or "element" not in row or col is None:
            raise InputError(f"{at}: needs the columns layer, element and ms (has "
                             f"{', '.join(row) or 'none'})")
        try:
            ms = float(row[col])
        except (TypeError, ValueError):
            raise InputError(f"{at}: {col} {row[col]!r} is not a number") from None
        if not ms >= 0 or ms == float("inf"):
            raise InputError(f"{at}: {col} must be a finite time >= 0 (got {row[col]!r})")
        out.append((str(row["layer"]).strip(), str(row["element"]).strip(), ms))
    if not out:
        raise InputError(f"{path}: no rows")
    return out


def import_profile(graph: "CnnGraph", platform: "Platform", path: str | Path,
                   warn: Callable[[str], None] = lambda msg: None) -> Profile:
    """A profile of `graph` on `platform` with the times of the table at `path`."""
    rows = read_table(path)
    by_node = {n: l.name for l in graph.layers for n in l.nodes}
    layer_names = {l.name for l in graph.layers}
    known = {e.name: e for e in platform.all_elements()}
    unknown_el = {e for _, e, _ in rows if e not in known}
    if unknown_el:
        raise InputError(f"{path}: element(s) {_some(unknown_el)} are not elements of platform "
                         f"{platform.name} (it has {_some(known, 12)})")
    unknown_layer = {l for l, _, _ in rows if l not in layer_names and l not in by_node}
    if unknown_layer:
        raise InputError(f"{path}: {len(unknown_layer)} name(s) match no layer or ONNX node of "
                         f"{graph.name}: {_some(unknown_layer)} (`hetflow inspect` lists the "
                         "layers)")
    # element -> layer -> {name given: ms}; a fused layer is named as hetflow names it (its
    # first node's name) or by all of its ONNX nodes
    given: dict[str, dict[str, dict[str, float]]] = {}
    for name, el, ms in rows:
        layer = name if name in layer_names else by_node[name]
        per = given.setdefault(el, {}).setdefault(layer, {})
        if name in per:
            raise InputError(f"{path}: {name!r} on {el!r} is given twice")
        per[name] = ms
    prof = _new_profile(graph, platform, estimated=False)
    prof.meta.update(method="imported", table=str(path))
    for el, per in given.items():
        missing = [l.name for l in graph.layers if l.name not in per]
        if missing:
            raise InputError(f"{path}: element {el!r} has no time for {len(missing)} layer(s) "
                             f"of {graph.name}: {_some(missing)}")
        times = {}
        for l in graph.layers:
            names = set(per[l.name])
            if names == {l.name} or names == set(l.nodes):
                times[l.name] = sum(per[l.name].values()) / 1e3
            else:
                raise InputError(f"{path}: element {el!r}: layer {l.name!r} has times for only "
                                 f"some of its ONNX nodes ({_some(names)} of {_some(l.nodes)})")
        prof.layer_times[el] = {l: {"median": t, "p10": t, "p90": t, "max": t, "n": 1}
                                for l, t in times.items()}
        prof.elements[el] = _element_info(known[el], el, imported=str(path))
    left = [e for e in known if e not in given and known[e].backend != "none"]
    if left:
        warn(f"{path} has no times for element(s) {_some(left, 8)}: they are left out of the "
             "profile, and the search cannot use them")
    prof.comm = {**DEFAULT_COMM, **{k: dict(v) for k, v in platform.comm.items()}}
    prof.calibration = {"dvfs": False, "comm_source": {
        k: ("platform" if k in platform.comm else "default guess") for k in prof.comm}}
    return prof
