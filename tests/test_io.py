"""hetflow.io: whole files or none, with the usual file mode; strict JSON; outputs held by one
process at a time."""
import json
import math
import os
import subprocess

import numpy as np
import pytest

from hypothesis import given, strategies as st

from hetflow.errors import InputError
from hetflow.io import atomic_write_text, claimed, dumps, finite, lock_path, write_json


def test_a_write_that_fails_leaves_neither_a_file_nor_a_temporary(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    with pytest.raises(TypeError):
        write_json(target, {"x": object()})  # fails while serialising: before any write
    assert os.listdir(tmp_path) == []
    atomic_write_text(target, "old")

    def no_rename(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_rename)  # the last step fails
    with pytest.raises(OSError):
        atomic_write_text(target, "new")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["out.json"]


def test_files_get_the_usual_mode(tmp_path):
    umask = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o644


# ------------------------------------------------------------------ strict JSON


def strict_loads(text: str):
    def refuse(name: str):
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


figures = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=4),
    max_leaves=20)


def same_but_finite(a, b) -> bool:
    """b is a, with each float that is not finite as None."""
    if isinstance(a, float):
        return b == a if math.isfinite(a) else b is None
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_but_finite(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_but_finite(x, y) for x, y in zip(a, b))
    return a == b


@given(figures)
def test_dumps_is_strict_json_with_non_finite_figures_as_null(data):
    assert same_but_finite(data, strict_loads(dumps(data)))


def test_numpy_figures_and_objects_are_strict_too(tmp_path):
    class Report:
        def to_dict(self):
            return {"fps": np.float64("nan"), "lat": np.array([1.0, np.inf])}

    path = write_json(tmp_path / "r.json", {"r": Report(), "t": (np.float32(2.5), -math.inf)})
    assert strict_loads(path.read_text()) == {"r": {"fps": None, "lat": [1.0, None]},
                                              "t": [2.5, None]}
    assert finite(float("nan")) is None and finite(3) == 3


# ------------------------------------------------------------------ output locks

def test_an_output_a_live_process_holds_is_refused_naming_it(tmp_path):
    other = subprocess.Popen(["sleep", "30"])  # a live process that is not this one
    try:
        out = tmp_path / "report"
        out.mkdir()
        lock_path(out).write_text(f"{other.pid}\n")
        with pytest.raises(InputError, match=f"{out}: another hetflow process "
                                             f"\\(pid {other.pid}\\) is writing it"):
            with claimed(out, folder=True):
                pass
        assert lock_path(out).read_text() == f"{other.pid}\n"  # not taken from its owner
    finally:
        other.kill()
        other.wait()
    # its owner gone, the lock is stale: taken over, and released after
    with claimed(out, folder=True):
        assert lock_path(out).read_text() == f"{os.getpid()}\n"
    assert not lock_path(out).exists()


def test_a_file_lock_sits_beside_the_file_and_goes_on_an_error(tmp_path):
    out = tmp_path / "p.json"
    with pytest.raises(RuntimeError):
        with claimed(out):
            assert lock_path(out) == tmp_path / ".p.json.lock" and lock_path(out).exists()
            raise RuntimeError("the command failed")
    assert os.listdir(tmp_path) == []
