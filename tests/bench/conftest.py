"""A small report folder as `hetflow bench --report DIR` leaves it: bench.json's data, and per
strategy a plan, a real trace (from run_plan on a tiny random model) and, for one, a Pareto CSV.

The baseline rows and the plans' predictions are made-up test data (no profile is measured);
the plan rows and traces are real runs."""
import os
import shutil
from pathlib import Path

import onnx
import pytest

from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.plan.mapping import Mapping, group_members
from hetflow.plan.plan import Plan
from hetflow.model.reader import load_model
from hetflow.model.synthetic import random_cnn_model
from hetflow.platform.spec import ProcessingElement
from hetflow.runtime.api import run_plan

CORES = sorted(os.sched_getaffinity(0))


def make_plan(graph, onnx_path: Path, assignment: dict[str, str], strategy: str) -> Plan:
    app = cnn_to_csdf(graph, assignment, "paper")
    elements = {e: ProcessingElement(e, "cpu", (CORES[i % len(CORES)],))
                for i, e in enumerate(e for a in app.phases for e in group_members(a))}
    return Plan(graph.name, graph.model_hash, str(onnx_path), "test", Mapping(assignment, "paper"),
                app, elements, 2, {}, strategy, {"seconds": 0.01}, False)


def row(name, kind, throughput, p50, p99, predicted=None, plan=None, report=None):
    return {"name": name, "kind": kind, "throughput": throughput, "latency_p50": p50,
            "latency_p99": p99, "predicted_throughput": predicted,
            "search_seconds": 0.01 if plan else None,
            "checked_frames": report.checked_frames if report else 0,
            "max_abs_error": report.max_abs_error if report else 0.0,
            "utilisation": report.utilisation if report else {},
            "stages": list(plan.app.phases) if plan else None}


def build_report_dir(root: Path, n_layers: int = 24, seed: int = 3) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    onnx_path = root / "tiny.onnx"
    onnx.save(random_cnn_model(n_layers, seed), onnx_path)
    graph = load_model(onnx_path)
    names = [l.name for l in graph.layers]
    third = len(names) // 3
    assignments = {
        "pipeline": {l: ("pe0" if i < third else "pe1" if i < 2 * third else "pe2|pe3")
                     for i, l in enumerate(names)},
        "single": {l: "pe0" for l in names},
    }
    rows = [row("peak single (pe0)", "baseline", 900.0, 1.1e-3, 1.6e-3),
            row("parallel copies", "baseline", 1500.0, 2.2e-3, 3.1e-3)]
    for strategy, assignment in assignments.items():
        plan = make_plan(graph, onnx_path, assignment, strategy)
        report = run_plan(plan, graph, frames=40, warmup=5,
                          trace_path=root / f"{graph.name}.{strategy}.trace.json")
        plan.predicted = {"throughput": report.throughput * 1.1,
                          "latency": report.latency["p50"] * 0.9}
        plan.save(root / f"{graph.name}.{strategy}.plan.json")
        rows.append(row(f"hetflow {strategy}", "plan", report.throughput, report.latency["p50"],
                        report.latency["p99"], plan.predicted["throughput"], plan, report))
    for r in rows:
        r["vs_parallel"] = r["throughput"] / 1500.0
        r["vs_single"] = r["throughput"] / 900.0
        r["p99_vs_parallel"] = r["latency_p99"] / 3.1e-3
    (root / f"{graph.name}.pipeline.pareto.csv").write_text(
        "throughput_fps,latency_ms,energy_j_per_frame,max_memory_mb,actors\n"
        "1200,1.5,,1.0,pe0\n1800,2.5,,1.2,pe0 pe1\n2100,4.0,,1.5,pe0 pe1 pe2|pe3\n")
    return {"platform": "test", "settings": {"strategies": list(assignments), "frames": 40},
            "models": [{"model": graph.name, "platform": "test", "rows": rows,
                        "profile_seconds": 0.0, "notes": {"layers": len(names)}}]}


@pytest.fixture(scope="session")
def built_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench_report")
    return root, build_report_dir(root)


@pytest.fixture(scope="session")
def rendered(built_report, tmp_path_factory):
    """The page written once for the tests that only read it: (folder, data, page text)."""
    from hetflow.bench.html import write_report

    root, data = built_report
    folder = tmp_path_factory.mktemp("rendered") / "report"
    shutil.copytree(root, folder)
    return folder, data, write_report(folder, data).read_text()


@pytest.fixture
def report_dir(built_report, tmp_path):
    """A fresh copy per test, so that tests may add, break or delete files."""
    root, data = built_report
    dest = tmp_path / "report"
    shutil.copytree(root, dest)
    return dest, data
