"""hetflow.io: whole files or none, with the usual file mode."""
import os

import pytest

from hetflow.io import atomic_write_text, write_json


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
