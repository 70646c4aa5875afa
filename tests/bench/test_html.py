"""The HTML report of `hetflow bench --report DIR`: every plot present and renderable, written
atomically, useful without the model file or a trace, and a clear error without matplotlib."""
import base64
import json
import re
import shutil
import subprocess
import sys

import networkx as nx
import pytest
from hypothesis import given, settings, strategies as st

import hetflow.bench.html as report_html
from hetflow.bench.html import (TraceEvent, layered_layout, load_trace, rebuild_report,
                                steady_window, write_report)
from hetflow.errors import InputError
from hetflow.model.synthetic import random_cnn_graph

# per model: throughput/latency + (graph, timeline) per plan + the pipeline plan's Pareto front
PLOTS = 1 + 2 * 2 + 1
IMG = re.compile(r'<img [^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def images(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in IMG.findall(page)]


def leftovers(folder) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".report.html")]


def test_page_holds_every_plot_inline(rendered):
    folder, _, page = rendered
    assert (folder / "report.html").read_text() == page and leftovers(folder) == []
    pngs = images(page)
    assert page.count("<img") == len(pngs) == PLOTS
    assert all(p.startswith(b"\x89PNG\r\n\x1a\n") and len(p) > 2000 for p in pngs)
    # self-contained: nothing is fetched from elsewhere
    assert not re.search(r'<(script|link)\b|src="(?!data:)|url\(', page)


def test_page_has_header_and_table_of_every_run(rendered):
    _, data, page = rendered
    assert "<h1>hetflow bench <small>test</small></h1>" in page
    assert re.search(r"written \d{4}-\d\d-\d\d \d\d:\d\d", page)
    assert "strategies pipeline,single" in page
    rows = data["models"][0]["rows"]
    assert page.count("<tr") == len(rows) + 1
    for r in rows:
        assert r["name"] in page and f"{r['throughput']:.1f}" in page
    assert page.index("plan <code>pipeline</code>") < page.index("plan <code>single</code>")
    assert "Showing stages only" not in page


def test_written_atomically(report_dir, monkeypatch):
    folder, data = report_dir
    old = folder / "report.html"
    old.write_text("the previous page")

    def broken(*a, **k):
        raise RuntimeError("drawing failed")

    with monkeypatch.context() as m:  # a failure while drawing leaves the old page alone
        m.setattr(report_html, "performance_figure", broken)
        with pytest.raises(RuntimeError):
            write_report(folder, data)
    assert old.read_text() == "the previous page" and leftovers(folder) == []

    import hetflow.cli.common as common

    def no_rename(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(report_html, "render_page", lambda folder, data: "<html>new</html>")
    with monkeypatch.context() as m:  # and so does a failure while writing
        m.setattr(common.os, "replace", no_rename)
        with pytest.raises(OSError):
            write_report(folder, data)
    assert old.read_text() == "the previous page" and leftovers(folder) == []
    write_report(folder, data)
    assert old.read_text() == "<html>new</html>" and leftovers(folder) == []


def test_without_model_file_draws_the_stage_graph(report_dir):
    folder, data = report_dir
    for path in folder.glob("*.plan.json"):  # the plans now point at a file that is gone
        plan = json.loads(path.read_text())
        plan["model_source"] = str(folder / "gone.onnx")
        path.write_text(json.dumps(plan))
    page = write_report(folder, data).read_text()
    assert page.count("Showing stages only: the model could not be loaded") == 2
    assert "gone.onnx: no such file" in page
    assert len(images(page)) == PLOTS


def test_rebuild_from_bench_json_with_missing_parts(report_dir):
    folder, data = report_dir
    with pytest.raises(InputError, match="bench.json: no such file"):
        rebuild_report(folder)
    (folder / "bench.json").write_text("{")
    with pytest.raises(InputError, match="not a bench JSON file"):
        rebuild_report(folder)
    data = json.loads(json.dumps(data))  # a strategy that found no plan is listed, not drawn
    data["models"][0]["rows"].append({"name": "hetflow balanced", "kind": "plan", "infeasible": True})
    (folder / "bench.json").write_text(json.dumps(data))
    (folder / "tiny.single.trace.json").unlink()
    (folder / "tiny.pipeline.pareto.csv").unlink()
    page = rebuild_report(folder).read_text()
    assert page.count("No trace for this plan.") == 1
    assert len(images(page)) == PLOTS - 2
    span = len(report_html.TABLE_COLUMNS) + 3  # the run's figures, checked, stages, utilisation
    assert ("hetflow balanced <span class=kind>plan</span></td>"
            f"<td colspan={span} class=missing>infeasible") in page


def test_bad_trace_names_the_file(report_dir):
    folder, data = report_dir
    (folder / "tiny.pipeline.trace.json").write_text('{"events": []}')
    with pytest.raises(InputError, match=r"tiny\.pipeline\.trace\.json: not a hetflow trace"):
        write_report(folder, data)


def test_without_matplotlib_says_how_to_install(report_dir, monkeypatch):
    folder, data = report_dir
    (folder / "report.html").unlink(missing_ok=True)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    with pytest.raises(InputError, match=r"pip install hetflow\[report\]"):
        write_report(folder, data)
    assert not (folder / "report.html").exists()


def test_module_imports_without_matplotlib():
    code = "import sys; sys.modules['matplotlib'] = None; import hetflow.bench.html"
    subprocess.run([sys.executable, "-c", code], check=True)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 30), st.floats(0, 100),
                          st.floats(0.01, 10)), min_size=1, max_size=60),
       st.integers(1, 8), st.floats(0, 1))
def test_steady_window_takes_consecutive_frames_and_all_their_firings(raw, frames, at):
    events = [TraceEvent(el, f"{el}#0", f, s, s + d) for el, f, s, d in raw]
    shown, t0, t1, chosen = steady_window(events, frames, at)
    available = sorted({e.frame for e in events})
    assert len(chosen) == min(frames, len(available))
    i = available.index(chosen[0])
    assert chosen == available[i:i + len(chosen)]
    assert all(e in shown for e in events if e.frame in chosen)
    assert all(e.end_ms > t0 and e.start_ms < t1 for e in shown)


@pytest.mark.parametrize("n,seed", [(8, 0), (30, 1), (60, 2), (120, 5)])
def test_layered_layout_draws_every_edge_left_to_right(n, seed):
    graph = random_cnn_graph(n, seed)
    g = nx.DiGraph((e.src, e.dst) for e in graph.edges)
    g.add_nodes_from(l.name for l in graph.layers)
    pos = layered_layout(g)
    assert set(pos) == set(g.nodes) and len(set(pos.values())) == len(pos)
    assert all(pos[u][0] < pos[v][0] for u, v in g.edges)


def test_trace_events_read_back(built_report):
    folder, _ = built_report
    events = load_trace(folder / "tiny.pipeline.trace.json")
    assert {e.element for e in events} == {"pe0", "pe1", "pe2", "pe3"}
    assert all(e.end_ms >= e.start_ms and e.stage.split("#")[0] in ("pe0", "pe1", "pe2|pe3")
               for e in events)


CHECK_IMAGES = """<script>addEventListener('load', () => {
  const all = [...document.images];
  const ok = all.filter(i => i.complete && i.naturalWidth > 0);
  document.body.insertAdjacentHTML('beforeend', `<p id=imgcheck>${ok.length}/${all.length}</p>`);
});</script></body>"""


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="needs a headless browser: apt-get install chromium (Debian)")
def test_every_image_renders_in_chromium(rendered, tmp_path):
    page = rendered[2]
    probe = tmp_path / "probe.html"  # the page plus a script that counts decoded images
    probe.write_text(page.replace("</body>", CHECK_IMAGES))
    out = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                          "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=60)
    found = re.search(r"<p id=\"imgcheck\">(\d+)/(\d+)</p>", out.stdout)
    assert found, f"chromium printed no result (rc {out.returncode}): {out.stderr[-400:]}"
    assert found.groups() == (str(PLOTS), str(PLOTS))


def test_the_designs_tried_before_choosing_are_listed(report_dir):
    folder, data = report_dir
    data = json.loads(json.dumps(data))
    row = next(r for r in data["models"][0]["rows"] if r["name"] == "hetflow single")
    row["pilots"] = [
        {"stages": ["pe0"], "strategy": "single", "predicted_throughput": 1234.5,
         "pilot_throughput": 1100.25, "pilot_latency_p99": 2.5e-3},
        {"stages": ["pe0|pe1"], "strategy": "single", "predicted_throughput": 1200.0,
         "pilot_throughput": 1150.75, "pilot_latency_p99": 3.25e-3, "chosen": True}]
    (folder / "bench.json").write_text(json.dumps(data))
    page = rebuild_report(folder).read_text()
    single = page[page.index("plan <code>single</code>"):]
    assert page.count("design tried") == 1 and "design tried" in single
    assert re.search(r"<td>pe0\|pe1</td><td>single</td><td class=num>1200.0</td>"
                     r"<td class=num>1150.8</td><td class=num>3.25</td><td>chosen</td>", single)
    assert "<td>pe0</td><td>single</td><td class=num>1234.5</td>" in single
