"""hetflow.io: whole files or none, with the usual file mode; and no library module reaches up
into the CLI for it (the layering the package keeps: cli on top, nothing imports it)."""
import ast
import os
from pathlib import Path

import pytest

import hetflow
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


def test_no_library_module_imports_the_cli():
    root = Path(hetflow.__file__).parent
    offenders = []
    for py in root.rglob("*.py"):
        rel = py.relative_to(root)
        if rel.parts[0] == "cli" or rel.name == "__main__.py":
            continue
        for node in ast.walk(ast.parse(py.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and (
                    node.module == "hetflow.cli" or node.module.startswith("hetflow.cli.")
                    or (node.level and node.module.split(".")[0] == "cli")):
                offenders.append(f"{rel}: {node.module}")
    assert not offenders
