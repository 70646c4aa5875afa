"""The package's layers, as an import contract: the CLI is on top and nothing imports it; the
platform is a pure description and imports nothing of the layers above it (mapping, profile,
runtime, bench, multi, backends)."""
import ast
from pathlib import Path

import hetflow

ROOT = Path(hetflow.__file__).parent


def imports(py: Path) -> list[str]:
    """Absolute names of the hetflow modules `py` imports (at any depth of the file)."""
    package = ".".join(("hetflow", *py.relative_to(ROOT).parent.parts))
    out = []
    for node in ast.walk(ast.parse(py.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                out.append(".".join([*base, *([node.module] if node.module else [])]))
            elif node.module:
                out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
    return [m for m in out if m == "hetflow" or m.startswith("hetflow.")]


def offenders(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return [f"{py.relative_to(ROOT)} imports {m}" for py in (ROOT / package).rglob("*.py")
            for m in imports(py) if m.split(".")[1:2] and m.split(".")[1] in forbidden]


def test_no_library_module_imports_the_cli():
    bad = [f"{py.relative_to(ROOT)} imports {m}" for py in ROOT.rglob("*.py")
           if py.relative_to(ROOT).parts[0] != "cli" and py.name != "__main__.py"
           for m in imports(py) if m.startswith("hetflow.cli")]
    assert not bad


def test_the_platform_is_a_pure_description():
    assert not offenders("platform", ("mapping", "profile", "runtime", "bench", "multi",
                                      "backends", "cli"))


def test_the_contract_sees_relative_imports():
    # an oracle for the helper itself: mapping/cluster.py imports .problem and the platform
    got = imports(ROOT / "mapping" / "cluster.py")
    assert "hetflow.mapping.problem" in got and "hetflow.platform.cluster" in got


def test_the_multi_cnn_engines_do_not_import_each_other_both_ways():
    procs = imports(ROOT / "multi" / "procs.py")
    runtime = imports(ROOT / "multi" / "runtime.py")
    assert not ("hetflow.multi.runtime" in procs and "hetflow.multi.procs" in runtime)


def test_benchmarks_live_outside_the_backends_and_write_no_repository_docs():
    import hetflow.backends.torch_cuda as cuda

    assert not hasattr(cuda, "whole_model_cuda_graph_fps")
    for py in ROOT.rglob("*.py"):  # where results go is the user's choice (an option)
        text = py.read_text()
        assert 'Path("docs' not in text and "Path('docs" not in text, py
