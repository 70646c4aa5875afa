"""`hetflow bench [MODEL ...]`: one command from model to evidence."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from .common import console, err_console, print_json, write_json


def print_bench(mb) -> None:
    t = Table(title=f"{mb.model} on {mb.platform}")
    for c in ("run", "frames/s", "p50 ms", "p99 ms", "x parallel", "x single", "p99/parallel",
              "predicted", "search s", "checked"):
        t.add_column(c, justify="left" if c == "run" else "right")
    for r in mb.rows:
        if r.get("infeasible"):
            t.add_row(r["name"], "no plan meets the latency cap", *[""] * 8)
            continue
        t.add_row(r["name"], f"{r['throughput']:.1f}", f"{r['latency_p50'] * 1e3:.2f}",
                  f"{r['latency_p99'] * 1e3:.2f}", f"{r['vs_parallel']:.2f}", f"{r['vs_single']:.2f}",
                  f"{r['p99_vs_parallel']:.2f}",
                  f"{r['predicted_throughput']:.1f}" if r["predicted_throughput"] else "-",
                  f"{r['search_seconds']:.2f}" if r["search_seconds"] is not None else "-",
                  f"{r['checked_frames']} ok" if r["checked_frames"] else "-")
    console.print(t)
    from hetflow.runtime.pilot import pilot_summary

    for r in mb.rows:
        if r.get("pilots"):
            console.print(f"{r['name']}: " + pilot_summary(r["pilots"]), highlight=False)


def register(app: typer.Typer) -> None:
    @app.command()
    def bench(
        models: Optional[list[str]] = typer.Argument(None, help="ONNX files or zoo names (default resnet18)"),
        platform: str = typer.Option("auto", "--platform", "-p"),
        strategies: str = typer.Option("pipeline,single", "--strategies"),
        quick: bool = typer.Option(False, "--quick", help="fewer frames and repeats"),
        frames: Optional[int] = typer.Option(None, "--frames"),
        pilots: int = typer.Option(3, "--pilots", min=1, help="run the best N designs by "
                                   "prediction briefly and keep the one measured best (1: "
                                   "trust the prediction)"),
        json_out: bool = typer.Option(False, "--json"),
        report: Optional[Path] = typer.Option(None, "--report", help="write JSON (+HTML) here"),
    ) -> None:
        """Profile, map and run MODELs against the baselines; print one table per model."""
        from hetflow.bench.core import BenchSettings, bench_model
        from hetflow.platform import resolve_platform

        plat = resolve_platform(platform, check_devices=True)
        s = BenchSettings(strategies=[x.strip() for x in strategies.split(",") if x.strip()],
                          pilot_candidates=pilots)
        if quick:
            s.frames, s.warmup, s.baseline_seconds, s.profile_repeats = 120, 20, 2.0, 5
            s.plan_seconds = s.under_load_seconds = 1.0
        if frames:
            s.frames = frames
        results = []
        from hetflow.errors import HetflowError

        failed = {}
        for m in models or ["resnet18"]:
            try:
                with err_console.status(f"bench {m}") as status:
                    mb = bench_model(m, plat, s, log=lambda msg: status.update(f"{m}: {msg}"),
                                     report_dir=report)
            except HetflowError as e:  # one model's failure is reported; the others still run
                failed[m] = str(e)
                err_console.print(f"[red]bench {m}: {e}[/red]")
                continue
            results.append(mb)
            if not json_out:
                print_bench(mb)
            if report:  # after every model, so a long run that is cut short keeps its results
                write_json(report / "bench.json", {"platform": plat.name, "settings": s.__dict__,
                                                   "models": [r.to_dict() for r in results],
                                                   "failed": failed})
        data = {"platform": plat.name, "settings": s.__dict__,
                "models": [r.to_dict() for r in results], "failed": failed}
        if report:
            write_json(report / "bench.json", data)
            from hetflow.bench.html import write_report

            try:
                page = write_report(report, data)
                err_console.print(f"wrote {page}")
            except HetflowError as e:  # e.g. no matplotlib: the JSON is there, say why no page
                err_console.print(f"[yellow]no HTML report: {e}[/yellow]")
        if json_out:
            print_json(data)
        if failed:
            raise typer.Exit(1)
