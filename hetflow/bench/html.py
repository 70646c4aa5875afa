"""The self-contained HTML page of `hetflow bench --report DIR`.

It reads what the bench wrote into DIR (bench.json's data, and per model and strategy the plan,
the Chrome trace and, where a search made one, the Pareto front as CSV) and draws, per model:
the CNN graph coloured by processing element with stage borders, a steady-state timeline per
element, measured against predicted throughput and latency, the Pareto front, and the table of
runs. Plots are PNGs embedded as base64, so the page opens anywhere, offline, as one file.

matplotlib is an optional extra (`hetflow[report]`): this module imports without it, and
`write_report` says how to install it.
"""
from __future__ import annotations

import base64
import csv
import glob
import html
import io
import json
import math
import struct
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from hetflow.errors import HetflowError, InputError
from hetflow.io import atomic_write_text
from hetflow.plan.plan import Plan
from hetflow.runtime.api import load_plan_model

REPORT_NAME = "report.html"
DPI = 144  # rendered at 1.44x the CSS size, so plots stay sharp on high-density screens
CSS_DPI = 100
EDGE_TRANSFER = "#222222"
EDGE_LOCAL = "#bbbbbb"
OTHER_FRAMES = "#d9d9d9"  # timeline bars of frames outside the chosen window


# ---------------------------------------------------------------- what the bench left in DIR


@dataclass
class TraceEvent:
    element: str
    stage: str  # 'actor#phase'
    frame: int
    start_ms: float
    end_ms: float

    @property
    def actor(self) -> str:
        return self.stage.rsplit("#", 1)[0]


@dataclass
class PlanRun:
    """One strategy's artefacts for one model; any of them may be missing."""

    strategy: str
    plan: Any | None  # hetflow.plan.plan.Plan
    trace: list[TraceEvent] | None
    pareto: list[dict[str, float]] | None
    row: dict[str, Any] | None  # the bench row of this plan's run


def load_trace(path: Path) -> list[TraceEvent]:
    """Complete ('X') events of a Chrome trace written by hetflow.runtime.trace."""
    try:
        events = json.loads(path.read_text())["traceEvents"]
        names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
        return [TraceEvent(names.get(e["tid"], str(e["tid"])), e["name"], int(e["args"]["frame"]),
                           e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3)
                for e in events if e.get("ph") == "X"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{path}: not a hetflow trace ({type(e).__name__}: {e})") from None


def load_pareto(path: Path) -> list[dict[str, float]]:
    try:
        with path.open(newline="") as f:
            return [{"throughput_fps": float(r["throughput_fps"]), "latency_ms": float(r["latency_ms"])}
                    for r in csv.DictReader(f)]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{path}: not a Pareto front CSV with columns throughput_fps, latency_ms "
                         f"({type(e).__name__}: {e})") from None


def find_plan_runs(report_dir: Path, model: str, rows: list[dict], strategies: list[str]
                   ) -> list[PlanRun]:
    """Every `{model}.{strategy}.plan.json` in DIR, in the order the bench ran the strategies."""

    prefix, suffix = f"{model}.", ".plan.json"
    found = [Path(p).name[len(prefix):-len(suffix)]
             for p in glob.glob(str(report_dir / f"{glob.escape(model)}.*{suffix}"))]
    order = {s: i for i, s in enumerate(strategies)}
    runs = []
    for s in sorted(found, key=lambda s: (order.get(s, len(order)), s)):
        base = report_dir / f"{model}.{s}"
        trace, pareto = Path(f"{base}.trace.json"), Path(f"{base}.pareto.csv")
        runs.append(PlanRun(s, Plan.load(f"{base}{suffix}"),
                            load_trace(trace) if trace.exists() else None,
                            load_pareto(pareto) if pareto.exists() else None,
                            next((r for r in rows if r["name"] == f"hetflow {s}"), None)))
    return runs


# ---------------------------------------------------------------- the mapped graph


def mapped_graph(plan) -> tuple[nx.DiGraph, str | None]:
    """Layers as nodes (attrs actor, stage, layers), CNN edges as edges, and None; where the
    plan's model cannot be loaded (moved file, another hash), the stages and the channels
    between them instead, and why."""

    stage_of = {l: f"{a}#{i}" for l, (a, i) in plan.app.phase_of().items()}
    try:
        graph = load_plan_model(plan)
    except HetflowError as e:
        g = nx.DiGraph()
        for a, phases in plan.app.phases.items():
            for p in phases:
                g.add_node(p.key, actor=a, stage=p.key, layers=len(p.layers))
        g.add_edges_from((f"{c.src}#{c.src_phase}", f"{c.dst}#{c.dst_phase}") for c in plan.app.channels)
        # an actor fires its stages in order: that order is a dependency too
        g.add_edges_from((p.key, q.key) for ps in plan.app.phases.values() for p, q in zip(ps, ps[1:]))
        return g, f"Showing stages only: the model could not be loaded ({e})."
    g = nx.DiGraph()
    for l in graph.layers:
        a = plan.app.assignment[l.name]
        g.add_node(l.name, actor=a, stage=stage_of[l.name], layers=1)
    g.add_edges_from((e.src, e.dst) for e in graph.edges)
    return g, None


def layered_layout(g: nx.DiGraph) -> dict[str, tuple[float, float]]:
    """x = topological depth (longest path from an input), y = order within that depth, sorted by
    the mean height of the predecessors so that chains stay straight and crossings stay few."""
    pos: dict[str, tuple[float, float]] = {}
    for x, generation in enumerate(nx.topological_generations(g)):
        def barycentre(n):
            ys = [pos[p][1] for p in g.predecessors(n)]
            return sum(ys) / len(ys) if ys else 0.0

        ordered = sorted(generation, key=lambda n: (barycentre(n), n))
        for i, n in enumerate(ordered):
            pos[n] = (float(x), i - (len(ordered) - 1) / 2)
    return pos


def _edge_path(p0: tuple[float, float], p1: tuple[float, float], above: bool) -> np.ndarray:
    """A straight line between neighbouring depths; a longer edge arcs away from the nodes it
    skips (a quadratic Bezier): outwards off the centre row, and on it stage borders above and
    edges inside a stage below, so that the borders stand out."""
    (x0, y0), (x1, y1) = p0, p1
    if x1 - x0 <= 1:
        return np.array([p0, p1])
    side = np.sign(y0 + y1) or (1.0 if above else -1.0)
    ctrl = np.array([(x0 + x1) / 2, (y0 + y1) / 2 + side * min(0.35 * math.sqrt(x1 - x0), 2.2)])
    t = np.linspace(0, 1, 16)[:, None]
    return (1 - t) ** 2 * np.array(p0) + 2 * (1 - t) * t * ctrl + t ** 2 * np.array(p1)


def stage_shades(g: nx.DiGraph, colors: dict[str, str]) -> dict[str, tuple]:
    """Stage -> its actor's colour, tinted lighter for every other stage of that actor, so that
    neighbouring stages on one element stay apart."""
    from matplotlib.colors import to_rgb

    shades = {}
    for stage in dict.fromkeys(d["stage"] for _, d in g.nodes(data=True)):
        actor, index = stage.rsplit("#", 1)
        tint = (0.0, 0.45, 0.22)[int(index) % 3]
        shades[stage] = tuple(c + (1 - c) * tint for c in to_rgb(colors[actor]))
    return shades


def graph_figure(g: nx.DiGraph, colors: dict[str, str], title: str):
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    pos = layered_layout(g)
    depth = max((x for x, _ in pos.values()), default=0) + 1
    ys = [y for _, y in pos.values()] or [0.0]
    handles = [Patch(color=colors[a], label=_actor_label(g, a))
               for a in dict.fromkeys(d["actor"] for _, d in g.nodes(data=True))]
    handles += [Line2D([], [], color=EDGE_TRANSFER, lw=1.3, label="stage border: tensor sent to another element"),
                Line2D([], [], color=EDGE_TRANSFER, lw=1.0, ls=(0, (3, 2)),
                       label="stage border on one element"),
                Line2D([], [], color=EDGE_LOCAL, lw=0.8, label="inside a stage")]
    legend_rows = math.ceil(len(handles) / 2)
    edges = {"local": [], "border": [], "transfer": []}
    for u, v in g.edges:
        du, dv = g.nodes[u], g.nodes[v]
        kind = ("local" if du["stage"] == dv["stage"] else
                "border" if du["actor"] == dv["actor"] else "transfer")
        edges[kind].append(_edge_path(pos[u], pos[v], above=kind != "local"))
    all_y = np.concatenate([ys] + [seg[:, 1] for segs in edges.values() for seg in segs])
    y_lo, y_hi = all_y.min() - 0.6, all_y.max() + 0.6
    plot_h = min(max(1.2, 0.38 * (y_hi - y_lo)), 5.5)
    fig = Figure(figsize=(min(max(7.0, 0.14 * depth), 11.2), plot_h + 0.45 + 0.2 * legend_rows))
    ax = fig.add_subplot()
    # hundreds of long skip edges (DenseNet) would be a black band: fade them as they multiply
    fade = float(np.clip(60 / max(len(g.edges), 1), 0.25, 1.0))
    ax.add_collection(LineCollection(edges["local"], colors=EDGE_LOCAL, linewidths=0.8, zorder=1))
    ax.add_collection(LineCollection(edges["border"], colors=EDGE_TRANSFER, linewidths=1.0,
                                     linestyles=(0, (3, 2)), alpha=fade, zorder=2))
    ax.add_collection(LineCollection(edges["transfer"], colors=EDGE_TRANSFER, linewidths=1.2,
                                     alpha=fade, zorder=2))
    nodes = list(g.nodes)
    shades = stage_shades(g, colors)
    size = float(np.clip(2400 / max(len(nodes), 1), 6, 60))
    ax.scatter([pos[n][0] for n in nodes], [pos[n][1] for n in nodes], s=size, zorder=3,
               c=[shades[g.nodes[n]["stage"]] for n in nodes],
               edgecolors=[colors[g.nodes[n]["actor"]] for n in nodes], linewidths=0.8)
    ax.set_xlim(-1, depth)
    ax.set_ylim(y_lo, y_hi)
    ax.set_axis_off()
    ax.set_title(title, loc="left", fontsize=10)
    legend = fig.legend(handles=handles, loc="lower left", ncol=2, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.2 * legend_rows / fig.get_figheight() + 0.02, 1, 1))
    legend.set_in_layout(False)
    return fig


def _actor_label(g: nx.DiGraph, actor: str) -> str:
    mine = [d for _, d in g.nodes(data=True) if d["actor"] == actor]
    stages = len({d["stage"] for d in mine})
    layers = sum(d["layers"] for d in mine)
    return f"{actor}: {stages} stage{'s' if stages > 1 else ''}, {layers} layers"


# ---------------------------------------------------------------- the pipeline timeline


def steady_window(events: list[TraceEvent], frames: int = 5, at: float = 0.8
                  ) -> tuple[list[TraceEvent], float, float, list[int]]:
    """The events overlapping `frames` consecutive frames taken late in the run (at the `at`
    fraction of it): the pipeline in steady state, past warm-up and before the drain."""
    all_frames = sorted({e.frame for e in events})
    end = min(len(all_frames) - 1, max(frames - 1, int(at * (len(all_frames) - 1))))
    chosen = all_frames[max(0, end - frames + 1): end + 1]
    wanted = set(chosen)
    mine = [e for e in events if e.frame in wanted]
    t0, t1 = min(e.start_ms for e in mine), max(e.end_ms for e in mine)
    return [e for e in events if e.end_ms > t0 and e.start_ms < t1], t0, t1, chosen


def timeline_figure(events: list[TraceEvent], colors: dict[str, str], title: str):
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    shown, t0, t1, chosen = steady_window(events)
    # rows in pipeline order: the element that first touches the earliest chosen frame on top
    first = {}
    for e in sorted(shown, key=lambda e: (e.frame, e.start_ms)):
        first.setdefault(e.element, len(first))
    rows = sorted(first, key=first.get)
    actor_of = {e.element: e.actor for e in shown}
    frame_colors = colormaps["tab10"]
    fig = Figure(figsize=(10, 0.42 * len(rows) + 1.3))
    ax = fig.add_subplot()
    span = t1 - t0
    for y, el in enumerate(rows):
        mine = [e for e in shown if e.element == el]
        ax.broken_barh([(e.start_ms - t0, e.end_ms - e.start_ms) for e in mine], (y - 0.36, 0.72),
                       facecolors=[frame_colors(chosen.index(e.frame) % 10) if e.frame in chosen
                                   else OTHER_FRAMES for e in mine],
                       edgecolors="white", linewidths=0.6)
        for e in mine:  # frame numbers where the bar is wide enough to hold them
            if e.frame in chosen and (e.end_ms - e.start_ms) / span > 0.03:
                ax.text((max(e.start_ms, t0) + min(e.end_ms, t1)) / 2 - t0, y, str(e.frame),
                        ha="center", va="center", fontsize=7, color="white", clip_on=True)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    for label, el in zip(ax.get_yticklabels(), rows):
        label.set_color(colors.get(actor_of[el], "black"))
        label.set_fontweight("bold")
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, span)
    ax.set_xlabel(f"ms (from {t0:.1f} ms into the run)", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#eeeeee")
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"{title}: frames {chosen[0]}–{chosen[-1]} (colour = frame; grey: other frames)",
                 loc="left", fontsize=10)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- measured vs predicted


def performance_figure(rows: list[dict], predicted_latency: dict[str, float]):
    """Throughput and latency per run; the prediction (hatched) under each plan's measurement."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    names = [r["name"] for r in rows]
    y = np.arange(len(rows))
    base = ["#9a9a9a" if r["kind"] == "baseline" else "#3b75af" for r in rows]
    fig = Figure(figsize=(10, 0.55 * len(rows) + 1.5))
    ax_t, ax_l = fig.subplots(1, 2, sharey=True)
    h = 0.38
    thr = [_num(r["throughput"]) for r in rows]
    pred = [_num(r.get("predicted_throughput")) for r in rows]
    ax_t.barh(y - h / 2, thr, h, color=base)
    ax_t.barh(y + h / 2, pred, h, color="white", edgecolor=base, hatch="////")
    p50 = [_num(r["latency_p50"]) * 1e3 for r in rows]
    p99 = [_num(r["latency_p99"]) * 1e3 for r in rows]
    plat = [predicted_latency.get(n, 0.0) * 1e3 for n in names]
    ax_l.barh(y - h / 2, p99, h, color=base, alpha=0.35)
    ax_l.barh(y - h / 2, p50, h, color=base)
    ax_l.barh(y + h / 2, plat, h, color="white", edgecolor=base, hatch="////")
    for ax, values, offset, fmt in ((ax_t, thr, -h / 2, "{:.1f}"), (ax_t, pred, h / 2, "{:.1f}"),
                                    (ax_l, p99, -h / 2, "{:.2f}"), (ax_l, plat, h / 2, "{:.2f}")):
        for yi, v in zip(y, values):
            if v > 0:
                ax.text(v, yi + offset, " " + fmt.format(v), va="center", fontsize=7)
    ax_t.set_yticks(y, names, fontsize=8)
    ax_t.set_ylim(len(rows) - 0.4, -0.6)
    ax_t.set_xlabel("frames/s (higher is better)", fontsize=8)
    ax_l.set_xlabel("latency ms: p50, p99 (light) (lower is better)", fontsize=8)
    for ax in (ax_t, ax_l):
        ax.tick_params(axis="x", labelsize=8)
        ax.margins(x=0.18)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    fig.legend(handles=[Patch(color="#9a9a9a", label="baseline (measured)"),
                        Patch(color="#3b75af", label="hetflow plan (measured)"),
                        Patch(facecolor="white", edgecolor="#3b75af", hatch="////",
                              label="predicted")],
               loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def _num(x) -> float:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else 0.0


def pareto_figure(points: list[dict[str, float]], plan, row: dict | None, title: str):
    """The search's front (predicted), the plan it chose, and what that plan measured."""
    from matplotlib.figure import Figure

    pts = sorted(points, key=lambda p: p["latency_ms"])
    fig = Figure(figsize=(5.2, 3.8))
    ax = fig.add_subplot()
    ax.step([p["latency_ms"] for p in pts], [p["throughput_fps"] for p in pts], where="post",
            color="#bbbbbb", lw=1, zorder=1)
    ax.scatter([p["latency_ms"] for p in pts], [p["throughput_fps"] for p in pts], s=22,
               color="#3b75af", label="front (predicted)", zorder=2)
    if plan is not None and plan.predicted.get("latency"):
        ax.scatter([plan.predicted["latency"] * 1e3], [plan.predicted["throughput"]], marker="*",
                   s=160, color="#e08214", edgecolors="black", linewidths=0.5, zorder=3,
                   label="chosen plan (predicted)")
    if row is not None and _num(row.get("latency_p50")):
        ax.scatter([row["latency_p50"] * 1e3], [row["throughput"]], marker="D", s=40,
                   color="#2ca02c", edgecolors="black", linewidths=0.5, zorder=3,
                   label="chosen plan (measured, p50)")
    ax.set_xlabel("latency ms (lower is better)", fontsize=8)
    ax.set_ylabel("frames/s (higher is better)", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(color="#eeeeee")
    ax.set_axisbelow(True)
    ax.legend(fontsize=7, frameon=False)
    ax.set_title(title, loc="left", fontsize=10)
    fig.tight_layout()
    return fig


def energy_figure(rows: list[dict]):
    """Throughput against energy per frame: each run as measured (baselines grey, plans
    blue; hollow where a part's energy was modelled, not read from a counter), and each
    plan's prediction (a cross joined to its run). None where no run has an energy figure."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    ran = [r for r in rows if _num(r.get("joules_per_frame")) and _num(r.get("throughput"))]
    if not ran:
        return None
    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.add_subplot()
    names: dict[tuple[float, float], list[str]] = {}  # plans that share a run share a point
    for r in ran:
        color = "#9a9a9a" if r["kind"] != "plan" else "#3b75af"
        x, y = r["joules_per_frame"], r["throughput"]
        ax.scatter([x], [y], s=36, zorder=3, edgecolors=color, linewidths=1.2,
                   facecolors=color if r.get("energy_measured") else "white")
        names.setdefault((x, y), []).append(r["name"])
        pred = _num(r.get("predicted_joules_per_frame"))
        rate = _num(r.get("predicted_throughput"))
        if pred and rate:
            ax.scatter([pred], [rate], marker="x", s=36, color=color, zorder=3)
            ax.plot([pred, x], [rate, y], color=color, lw=0.6, ls=":", zorder=2)
    for (x, y), same in names.items():
        ax.annotate(", ".join(same), (x, y), xytext=(4, 3), textcoords="offset points",
                    fontsize=7)
    ax.set_xlabel("energy J/frame (lower is better)", fontsize=8)
    ax.set_ylabel("frames/s (higher is better)", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(color="#eeeeee")
    ax.set_axisbelow(True)
    ax.legend(handles=[
        Line2D([], [], ls="", marker="o", color="#9a9a9a", label="baseline (measured)"),
        Line2D([], [], ls="", marker="o", color="#3b75af", label="hetflow plan (measured)"),
        Line2D([], [], ls="", marker="o", mfc="white", color="#3b75af",
               label="a part modelled, not metered"),
        Line2D([], [], ls="", marker="x", color="#3b75af", label="predicted")],
        fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- HTML


def figure_img(fig, alt: str) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, facecolor="white")
    png = buf.getvalue()
    width, height = struct.unpack(">II", png[16:24])  # the PNG header's IHDR size
    scale = CSS_DPI / DPI
    return (f'<img alt="{html.escape(alt)}" width="{round(width * scale)}" '
            f'height="{round(height * scale)}" src="data:image/png;base64,'
            f'{base64.b64encode(png).decode("ascii")}">')


def _fmt(x, spec: str, scale: float = 1.0) -> str:
    if not isinstance(x, (int, float)) or not math.isfinite(x):
        return "–"
    return format(x * scale, spec)


TABLE_COLUMNS = [  # header, row key, format, scale
    ("frames/s", "throughput", ".1f", 1), ("predicted", "predicted_throughput", ".1f", 1),
    ("p50 ms", "latency_p50", ".2f", 1e3), ("p99 ms", "latency_p99", ".2f", 1e3),
    ("× parallel", "vs_parallel", ".2f", 1), ("× single", "vs_single", ".2f", 1),
    ("p99 / parallel", "p99_vs_parallel", ".2f", 1), ("J/frame", "joules_per_frame", ".3g", 1),
    ("predicted J/frame", "predicted_joules_per_frame", ".3g", 1), ("W", "watts", ".1f", 1),
    ("search s", "search_seconds", ".2f", 1),
]


def rows_table(rows: list[dict]) -> str:
    best = max((r["throughput"] for r in rows if isinstance(r.get("throughput"), (int, float))),
               default=None)
    head = "".join(f"<th>{html.escape(h)}</th>" for h, *_ in TABLE_COLUMNS)
    out = [f"<table><thead><tr><th>run</th>{head}<th>checked</th><th>stages</th>"
           "<th>utilisation</th></tr></thead><tbody>"]
    for r in rows:
        label = (f"<td>{html.escape(r['name'])} <span class=kind>{html.escape(r.get('kind', ''))}"
                 "</span></td>")
        if r.get("infeasible"):
            out.append(f"<tr>{label}<td colspan={len(TABLE_COLUMNS) + 3} class=missing>"
                       "infeasible: no mapping met the constraints</td></tr>")
            continue
        cells = "".join(f"<td class=num>{_fmt(r.get(k), f, s)}</td>" for _, k, f, s in TABLE_COLUMNS)
        checked = f"{r['checked_frames']} ok" if r.get("checked_frames") else "–"
        stages = ", ".join(r.get("stages") or []) or "–"
        util = ", ".join(f"{el} {u:.0%}" for el, u in (r.get("utilisation") or {}).items()) or "–"
        cls = " class=best" if r.get("throughput") == best else ""
        out.append(f"<tr{cls}>{label}{cells}<td class=num>{checked}</td><td>{html.escape(stages)}</td>"
                   f"<td class=small>{html.escape(util)}</td></tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def pilots_table(pilots: list[dict]) -> str:
    """The designs run briefly before this plan was chosen (measure, then choose)."""
    out = ["<table class=small><thead><tr><th>design tried</th><th>strategy</th>"
           "<th>predicted fps</th><th>pilot fps</th><th>pilot p99 ms</th><th></th></tr>"
           "</thead><tbody>"]
    for p in pilots:
        out.append(f"<tr><td>{html.escape(', '.join(p.get('stages') or []))}</td>"
                   f"<td>{html.escape(str(p.get('strategy', '')))}</td>"
                   f"<td class=num>{_fmt(p.get('predicted_throughput'), '.1f')}</td>"
                   f"<td class=num>{_fmt(p.get('pilot_throughput'), '.1f')}</td>"
                   f"<td class=num>{_fmt(p.get('pilot_latency_p99'), '.2f', 1e3)}</td>"
                   f"<td>{'chosen' if p.get('chosen') else html.escape(p.get('pilot_error', ''))}"
                   "</td></tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def actor_colors(runs: list[PlanRun]) -> dict[str, str]:
    """One colour per actor, the same in every plan of a model."""
    from matplotlib import colormaps

    actors = sorted({a for r in runs if r.plan is not None for a in r.plan.app.phases})
    cmap = colormaps["tab10" if len(actors) <= 10 else "tab20"]
    return {a: _hex(cmap(i % cmap.N)) for i, a in enumerate(actors)}


def _hex(rgba) -> str:
    return "#" + "".join(f"{round(c * 255):02x}" for c in rgba[:3])


def model_section(report_dir: Path, mb: dict, strategies: list[str]) -> str:
    name = mb["model"]
    rows = mb["rows"]
    runs = find_plan_runs(report_dir, name, rows, strategies)
    colors = actor_colors(runs)
    measured = [r for r in rows if not r.get("infeasible")]
    # a run is fed as fast as the plan takes frames: the latency predicted for that, where known
    predicted_latency = {r.row["name"]: r.row.get("predicted_latency_saturated")
                         or r.plan.predicted.get("latency_saturated")
                         or r.row.get("predicted_latency") or r.plan.predicted.get("latency")
                         or 0.0 for r in runs if r.row is not None and r.plan is not None}
    notes = mb.get("notes", {})
    facts = [f"{notes['layers']} layers" if "layers" in notes else None,
             f"profile {mb['profile_seconds']:.1f} s" if mb.get("profile_seconds") else "profile reused",
             "parallel copies on " + ", ".join(notes["parallel_elements"])
             if notes.get("parallel_elements") else None]
    out = [f'<section id="{html.escape(name)}"><h2>{html.escape(name)}</h2>',
           f"<p class=facts>{html.escape(' · '.join(f for f in facts if f))}</p>",
           rows_table(rows)]
    if measured:
        out.append(_figure(performance_figure(measured, predicted_latency),
                           f"{name}: throughput and latency",
                           "Measured runs (solid) and the plans' predictions (hatched) for the "
                           "same plan. Latency: p50 solid, p99 light; predicted for frames fed "
                           "as fast as the plan takes them, as the run fed them."))
    energy = energy_figure(measured) if measured else None
    if energy is not None:
        methods = "; ".join(dict.fromkeys(r["energy_method"] for r in measured
                                          if r.get("energy_method")))
        out.append(_figure(energy, f"{name}: throughput against energy per frame",
                           "Each run's energy per frame over its steady window, against its "
                           f"rate; crosses: the plans' predictions. Read as: {methods}."))
    for run in runs:
        out.append(f"<h3>plan <code>{html.escape(run.strategy)}</code></h3>")
        if run.row is not None and run.row.get("pilots"):
            out.append("<p>Chosen by measurement among the best designs by prediction:</p>"
                       + pilots_table(run.row["pilots"]))
        out.append("<div class=plots>")
        g, fallback = mapped_graph(run.plan)
        what = f"{len(g)} {'stages' if fallback else 'layers'}"
        out.append(_figure(graph_figure(g, colors, f"{name}, {run.strategy}: {what}"),
                           f"{name} {run.strategy} mapped graph",
                           "Left to right by topological depth; colour = element, shade = stage "
                           "(a sub-network run as one call); dark edges are stage borders. "
                           + (fallback or ""), wide=True))
        if run.trace:
            out.append(_figure(timeline_figure(run.trace, colors, f"{name}, {run.strategy}"),
                               f"{name} {run.strategy} timeline",
                               "Steady state: a few consecutive frames late in the run; one row "
                               "per element, one bar per stage firing, coloured by frame.",
                               wide=True))
        else:
            out.append("<p class=missing>No trace for this plan.</p>")
        if run.pareto:
            out.append(_figure(pareto_figure(run.pareto, run.plan, run.row,
                                             f"{name}, {run.strategy}: Pareto front"),
                               f"{name} {run.strategy} Pareto front",
                               "The search's non-dominated plans (predicted)."))
        out.append("</div>")
    out.append("</section>")
    return "\n".join(out)


def _figure(fig, alt: str, caption: str, wide: bool = False) -> str:
    img = figure_img(fig, alt)  # a Figure made without pyplot is freed with its last reference
    cls = " class=wide" if wide else ""
    return f"<figure{cls}>{img}<figcaption>{html.escape(caption.strip())}</figcaption></figure>"


CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#222;
 max-width:1120px;margin:0 auto;padding:24px 28px 60px;background:#fafafa}
header{border-bottom:2px solid #3b75af;margin-bottom:18px;padding-bottom:8px}
h1{font-size:24px;margin:0 0 4px}h1 small{color:#777;font-weight:normal;font-size:15px}
h2{font-size:20px;margin:34px 0 2px;border-bottom:1px solid #ddd}
h3{font-size:16px;margin:26px 0 6px}
.meta,.facts{color:#555;margin:2px 0}.settings{color:#666;font-size:12px}
nav a{margin-right:12px}
table{border-collapse:collapse;margin:12px 0;font-size:13px;background:white;width:100%}
th,td{padding:4px 8px;border-bottom:1px solid #e4e4e4;text-align:left;vertical-align:top}
th{background:#f0f3f7;font-weight:600;white-space:nowrap}td.num{text-align:right;white-space:nowrap}
tr.best td{background:#eef6ea;font-weight:600}.kind{color:#888;font-size:11px;font-weight:normal}
.small{font-size:11px;color:#555}
figure{margin:14px 0;background:white;border:1px solid #e4e4e4;padding:8px;display:inline-block;
 max-width:calc(100% - 18px);overflow-x:auto;vertical-align:top}
figure.wide{display:block}
figure img{max-width:100%;height:auto;display:block}
figcaption{color:#666;font-size:12px;margin-top:4px}
.missing{color:#a33}
"""


def render_page(report_dir: Path, data: dict) -> str:
    settings = data.get("settings", {})
    strategies = list(settings.get("strategies", []))
    models = data.get("models", [])
    setting_text = " · ".join(f"{k} {v if not isinstance(v, list) else ','.join(map(str, v))}"
                              for k, v in settings.items())
    date = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    nav = " ".join(f'<a href="#{html.escape(m["model"])}">{html.escape(m["model"])}</a>'
                   for m in models)
    sections = [model_section(report_dir, m, strategies) for m in models]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>hetflow bench · {html.escape(str(data.get("platform", "")))}</title>
<style>{CSS}</style></head>
<body><header><h1>hetflow bench <small>{html.escape(str(data.get("platform", "?")))}</small></h1>
<p class=meta>{len(models)} model{'s' if len(models) != 1 else ''} · written {html.escape(date)}</p>
<p class=settings>{html.escape(setting_text)}</p><nav>{nav}</nav></header>
{chr(10).join(sections)}
</body></html>
"""


def write_report(report_dir: Path, data: dict) -> Path:
    """Write `report_dir/report.html` (atomically) from the bench's data and the files it left
    in `report_dir`; return its path."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError("the HTML report needs matplotlib: pip install hetflow[report]") from None

    report_dir = Path(report_dir)
    page = render_page(report_dir, data)  # everything is drawn before the file is touched
    return atomic_write_text(report_dir / REPORT_NAME, page)


def rebuild_report(report_dir: Path) -> Path:
    """Write the page again from `report_dir/bench.json` (e.g. after a hetflow update)."""
    path = Path(report_dir) / "bench.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (run hetflow bench --report {report_dir})") from None
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not a bench JSON file ({e})") from None
    return write_report(Path(report_dir), data)
