"""The package's layers, as import contracts: the CLI is on top and nothing imports it; each
package imports only the packages below it (no cycle between packages); a function defers an
import only for an optional dependency or to break a cycle inside its package."""
import ast
import subprocess
import sys
from pathlib import Path

import hetflow

ROOT = Path(hetflow.__file__).parent


def statement_targets(py: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """Absolute names of the modules one import statement of `py` imports."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not node.level:
        return [node.module] if node.module else []
    package = ".".join(("hetflow", *py.relative_to(ROOT).parent.parts))
    base = package.split(".")[:len(package.split(".")) - node.level + 1]
    return [".".join([*base, *([node.module] if node.module else [])])]


def _top_statements(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue  # never runs
        yield from ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else (node,)


def imports(py: Path, top_level: bool = False, every: bool = False) -> list[str]:
    """Absolute names of the hetflow modules `py` imports (`every`: all modules), at any depth
    of the file or (`top_level`) in the statements that run when it is imported."""
    tree = ast.parse(py.read_text())
    nodes = _top_statements(tree) if top_level else ast.walk(tree)
    out = [t for node in nodes if isinstance(node, (ast.Import, ast.ImportFrom))
           for t in statement_targets(py, node)]
    return out if every else [m for m in out if m == "hetflow" or m.startswith("hetflow.")]


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


# the order of the packages, top first: each imports only packages below it (pyproject.toml's
# `layers` contract says the same to import-linter, which CI runs); packages on one row are
# independent of each other
LAYERS = [("cli",), ("bench",), ("multi",), ("mapping",), ("profile",), ("runtime",), ("plan",),
          ("backends",), ("dataflow", "platform"), ("model",), ("io", "schema"), ("errors", "interrupt", "rules")]
# imports a module may defer into a function: dependencies that an extra installs
OPTIONAL = {"torch", "torchvision", "onnx2torch", "onnxscript", "pymoo", "ortools", "cvxpy",
            "scipy", "matplotlib", "ray", "pynvml", "zeus"}


def package_of(module: str) -> str | None:
    """The package (or top-level module: io, schema, errors) of hetflow that `module` is in."""
    parts = module.split(".")
    if len(parts) > 1 and ((ROOT / parts[1]).is_dir() or (ROOT / f"{parts[1]}.py").exists()):
        return parts[1]
    return None


def package_imports() -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> the files that import across, for every import
    statement at any depth of every file."""
    out: dict[tuple[str, str], list[str]] = {}
    for py in ROOT.rglob("*.py"):
        rel = py.relative_to(ROOT)
        if rel.name in ("__init__.py", "__main__.py") and len(rel.parts) == 1:
            continue  # the root package's own imports
        here = rel.parts[0].removesuffix(".py")
        for m in imports(py):
            there = package_of(m)
            if here and there and here != there:
                out.setdefault((here, there), []).append(str(py.relative_to(ROOT)))
    return out


def test_no_import_cycle_between_packages():
    import networkx as nx

    g = nx.DiGraph(list(package_imports()))
    assert not list(nx.simple_cycles(g))


def test_each_package_imports_only_the_layers_below_it():
    rank = {p: i for i, row in enumerate(LAYERS) for p in row}
    assert set(rank) == {p.name.removesuffix(".py") for p in ROOT.iterdir()
                         if (p / "__init__.py").exists()
                         or p.suffix == ".py" and not p.name.startswith("__")}
    upward = {f"{a} imports {b} ({', '.join(sorted(set(files)))})"
              for (a, b), files in package_imports().items() if rank[a] >= rank[b]}
    assert not upward


def test_the_contract_is_the_one_import_linter_checks():
    import tomllib

    conf = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())
    layers = next(c["layers"] for c in conf["tool"]["importlinter"]["contracts"]
                  if c["type"] == "layers")
    assert layers == [" | ".join(f"hetflow.{p}" for p in row) for row in LAYERS]


def _module_graph():
    """Module -> the hetflow modules its top-level statements import (a package's __init__
    included, as Python runs it first)."""
    import networkx as nx

    mods = {".".join(("hetflow", *py.relative_to(ROOT).with_suffix("").parts)).removesuffix(
        ".__init__"): py for py in ROOT.rglob("*.py")}
    g = nx.DiGraph()
    for m, py in mods.items():
        g.add_node(m)
        for t in imports(py, top_level=True):
            parts = t.split(".")
            for i in range(2, len(parts) + 1):
                if ".".join(parts[:i]) in mods and ".".join(parts[:i]) != m:
                    g.add_edge(m, ".".join(parts[:i]))
    return mods, g


def test_imports_inside_functions_are_for_optional_dependencies_or_break_a_cycle():
    """A function may import an optional dependency (or a module that needs one) lazily, or a
    module of its own package whose import at the top would close a cycle; nothing else."""
    import networkx as nx

    mods, g = _module_graph()
    heavy = {m for m, py in mods.items()
             if any(t.split(".")[0] in OPTIONAL for t in imports(py, top_level=True, every=True))}
    heavy = {m for m in mods if any(h == m or nx.has_path(g, m, h) for h in heavy)}
    bad = []
    for m, py in mods.items():
        for fn in ast.walk(ast.parse(py.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in fn.body:
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                for t in statement_targets(py, node):
                    if t.split(".")[0] in OPTIONAL or t in heavy:
                        continue
                    target = max((x for x in mods if t == x or t.startswith(x + ".")),
                                 key=len, default=None)
                    if target and nx.has_path(g, target, m):
                        continue  # at the top it would close a cycle
                    bad.append(f"{py.relative_to(ROOT)}:{node.lineno} imports {t}")
    assert not bad


def test_the_cli_loads_with_no_optional_dependency_installed():
    """`hetflow --help` (every command module imported) in a process where importing any
    optional dependency fails, as on a machine with the plain install."""
    guard = ("import builtins, sys\n"
             "real = builtins.__import__\n"
             f"optional = {sorted(OPTIONAL)!r}\n"
             "def guard(name, *a, **k):\n"
             "    if name.split('.')[0] in optional:\n"
             "        raise ModuleNotFoundError(f'No module named {name!r}')\n"
             "    return real(name, *a, **k)\n"
             "builtins.__import__ = guard\n"
             "sys.argv = ['hetflow', '--help']\n"
             "from hetflow.cli.main import main\n"
             "main()\n")
    r = subprocess.run([sys.executable, "-c", guard], capture_output=True, text=True,
                       cwd=ROOT.parent, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "bench" in r.stdout


def test_no_function_is_longer_than_a_screenful_or_two():
    """Every function of hetflow/ (docstring and nested functions included) is at most 120
    lines, and the bench's core at most 400: past that, split it into named steps."""
    long = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 120:
                    long.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name} "
                                f"({lines} lines)")
    assert not long, long
    assert len((ROOT / "bench" / "core.py").read_text().splitlines()) <= 400
