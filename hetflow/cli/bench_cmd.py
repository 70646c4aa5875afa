"""`hetflow bench [MODEL ...]`: one command from model to evidence."""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from hetflow import interrupt
from hetflow.io import claimed, write_json
from hetflow.rules import QUICK_MODEL_SECONDS

from hetflow.cli.common import MAX_BATCH_HELP, PRECISION_HELP, TOLERANCE_HELP, check_writable, console, err_console, positive, print_json, progress, strategy_list, strategy_names
from hetflow.bench.core import BenchSettings, bench_model, cache_dir
from hetflow.bench.html import write_report
from hetflow.errors import HetflowError, InputError
from hetflow.mapping.pilot import pilot_summary
from hetflow.model import zoo
from hetflow.model.accuracy import Tolerance
from hetflow.platform import resolve_platform
from hetflow.platform.precision import DEFAULT_PRECISION, precision_variants


def energy_cell(measured: float | None, predicted: float | None) -> str:
    """J/frame measured, and predicted in brackets where the plan had a prediction."""
    cell = f"{measured:.3g}" if measured is not None else "-"
    return cell + (f" ({predicted:.3g})" if predicted is not None else "")


def print_bench(mb) -> None:
    t = Table(title=f"{mb.model} on {mb.platform}")
    # predicted: a priori, from the profile before the plan ran; refined: after timing the plan's
    # own stages (not a prediction)
    for c in ("run", "frames/s", "p50 ms", "p99 ms", "x parallel", "x single", "p99/parallel",
              "predicted", "refined", "J/frame", "W", "search s", "checked"):
        t.add_column(c, justify="left" if c == "run" else "right")
    for r in mb.rows:
        if r.get("infeasible"):
            t.add_row(r["name"], "no plan meets the latency cap", *[""] * 11)
            continue
        t.add_row(r["name"], f"{r['throughput']:.1f}", f"{r['latency_p50'] * 1e3:.2f}",
                  f"{r['latency_p99'] * 1e3:.2f}", f"{r['vs_parallel']:.2f}", f"{r['vs_single']:.2f}",
                  f"{r['p99_vs_parallel']:.2f}",
                  f"{r['predicted_throughput']:.1f}" if r["predicted_throughput"] else "-",
                  f"{r['refined_throughput']:.1f}" if r.get("refined_throughput") else "-",
                  energy_cell(r.get("joules_per_frame"), r.get("predicted_joules_per_frame")),
                  f"{r['watts']:.1f}" if r.get("watts") is not None else "-",
                  f"{r['search_seconds']:.2f}" if r["search_seconds"] is not None else "-",
                  f"{r['checked_frames']} ok" if r["checked_frames"] else "-")
    console.print(t)
    methods = dict.fromkeys(r["energy_method"] for r in mb.rows if r.get("energy_method"))
    for m in methods:
        console.print(f"energy read as: {m}", highlight=False)
    for line in precision_lines(mb.rows):
        console.print(line, highlight=False)

    for r in mb.rows:
        if r.get("pilots"):
            console.print(f"{r['name']}: " + pilot_summary(r["pilots"]), highlight=False)
    for why, names in refused_lines(mb.notes.get("precisions_refused", {})):
        console.print(f"not offered to the search, outside the tolerance on the profile's "
                      f"check: {', '.join(names)}: {why} (--tolerance loosens it)",
                      highlight=False)
    if mb.notes.get("head_to_head"):
        from hetflow.bench.rows import head_to_head_line

        console.print(head_to_head_line(mb.notes["head_to_head"]), highlight=False)
        if mb.notes.get("head_to_head_balanced"):
            console.print(head_to_head_line(mb.notes["head_to_head_balanced"]), highlight=False)
    if mb.notes.get("budget"):
        from hetflow.bench.budget import summary

        console.print(summary(mb.notes["budget"]), highlight=False)


def refused_lines(refused: dict[str, str]) -> list[tuple[str, list[str]]]:
    """(why, the elements refused for it) of a bench's refused precisions, one per reason."""
    by_why: dict[str, list[str]] = {}
    for name, why in refused.items():
        by_why.setdefault(why, []).append(name)
    return list(by_why.items())


def precision_lines(rows: list[dict]) -> list[str]:
    """Under the table, where any run is not all fp32: each run's precisions, its deviation
    from the fp32 reference and its rate over the copies at its precision."""
    if not any(set(r.get("precisions") or ()) - {DEFAULT_PRECISION} for r in rows):
        return []
    lines = []
    for r in rows:
        if r.get("infeasible") or not r.get("precisions"):
            continue
        line = f"{r['name']}: {', '.join(r['precisions'])}"
        dev = r.get("deviation")
        if dev:
            rel = [o["rel_l2_worst"] for o in dev["outputs"].values()]
            worst = "inf" if None in rel else f"{max(rel):.3g}"
            line += (f", rel L2 {worst} worst over {dev['frames']} {dev['inputs']} "
                     f"({'within' if dev['passed'] else 'OUTSIDE'} the tolerance)")
        if r.get("vs_parallel_same_precision"):
            line += (f", {r['vs_parallel_same_precision']:.2f}x the copies at its precision "
                     "(one run each, not a head to head)")
        lines.append(line)
    return lines


def check_models(models: list[str]) -> None:
    """Refuse a model that is neither a file nor a zoo name before benching any (the same rule
    as resolve_model, without building the models); a file that cannot be read fails in its
    turn, as a failed model."""

    for m in models:
        p = Path(m)
        if p.exists() or p.suffix == ".onnx" or "/" in m:
            if not p.is_file():
                raise InputError(f"{m}: no such model file")
            continue
        try:
            zoo.get_entry(m)
        except InputError:
            raise InputError(f"{m}: no such file, and not a zoo model (known: "
                             f"{', '.join(e.name for e in zoo.list_models())})") from None


def settings_of(strategies, pilots: int, budget: float | None, head_to_head: int,
                precision: str, tolerance, quick: bool, frames: int | None,
                max_batch: int | None = None) -> BenchSettings:
    """The bench's settings from its options (`--quick`: every measurement shortened, and
    QUICK_MODEL_SECONDS a model unless a budget is given)."""
    s = BenchSettings(strategies=strategies, pilot_candidates=pilots, budget_seconds=budget,
                      head_to_head=head_to_head, precision=precision, tolerance=tolerance,
                      max_batch=max_batch)
    if quick:
        s.frames, s.warmup, s.baseline_seconds, s.profile_repeats = 120, 20, 2.0, 5
        s.plan_seconds = s.under_load_seconds = 1.0
        s.lane_seconds = 0.5
        if budget is None:
            s.budget_seconds, s.budget_strict = QUICK_MODEL_SECONDS.value, False
    if frames:
        s.frames = frames
    return s


def bench(
    models: Optional[list[str]] = typer.Argument(None, help="ONNX files or zoo names (default resnet18)"),
    platform: str = typer.Option("auto", "--platform", "-p",
                                 help="platform YAML file, bundled name, or auto (this "
                                      "machine)"),
    strategies: str = typer.Option("pipeline,single", "--strategies",
                                   callback=strategy_list,
                                   help="comma-separated search strategies, each one of: "
                                        + ", ".join(strategy_names())),
    quick: bool = typer.Option(False, "--quick", help=(
        "fewer frames and repeats, and a budget of "
        f"{QUICK_MODEL_SECONDS.value:.0f} s a model unless --budget is given "
        "(kept by shortening measurements, skipping pilots and re-timing, and profiling "
        "fewer core groupings; a model that needs more goes on at the minimums)")),
    frames: Optional[int] = typer.Option(None, "--frames", min=2,
                                         help="frames per plan run, at least (default 200; "
                                              "120 with --quick)"),
    pilots: int = typer.Option(3, "--pilots", min=1, help="run the best N designs by "
                               "prediction briefly and keep the one measured best (1: "
                               "trust the prediction)"),
    budget: Optional[float] = typer.Option(
        None, "--budget", metavar="SECONDS", callback=positive,
        help="wall-clock seconds for all MODELs together: each model gets an equal share of "
             "what is left, its measurements are shortened to fit and, where that is not "
             "enough, the one-lane reference rows, pilots, re-timing and then plan kinds are "
             "skipped (each said and kept in the results); a model whose profile and "
             "baselines cannot fit fails"),
    head_to_head: int = typer.Option(
        0, "--head-to-head", metavar="N", min=0,
        help="after the plans, run the best plan and the parallel copies alternately N "
             "times each and report the medians' ratio, then the balanced plan the same way "
             "with its medians' p99 ratio (the bench's own ratios are one sample a side, "
             "minutes apart; outside the --budget; 0: off)"),
    json_out: bool = typer.Option(False, "--json", help="print the results as JSON"),
    report: Optional[Path] = typer.Option(None, "--report",
                                          help="folder for bench.json, plans, traces and "
                                               "report.html"),
    precision: str = typer.Option(
        "fp32", "--precision", help=PRECISION_HELP + " (auto: among those within "
                                    "--tolerance on the profile's check); baselines run "
                                    "at each precision besides fp32 too"),
    tolerance: Optional[str] = typer.Option(
        None, "--tolerance", help=TOLERANCE_HELP),
    max_batch: Optional[int] = typer.Option(None, "--max-batch", min=1,
                                            help=MAX_BATCH_HELP + "; the baselines too"),
) -> None:
    """Profile, map and run MODELs against the baselines; print one table per model."""
    started = time.perf_counter()
    tol = Tolerance.parse(tolerance) if tolerance is not None else None

    models = models or ["resnet18"]
    check_models(models)
    check_writable(report, folder=True)
    plat = resolve_platform(platform, check_devices=True)
    precision_variants(plat, precision)  # a bad setting fails before any model is benched
    s = settings_of(strategies, pilots, budget, head_to_head, precision, tol, quick, frames,
                    max_batch)
    err_console.print(f"profiles are cached in {cache_dir() / 'profiles'}", highlight=False)
    results, failed = [], {}
    interrupted = False
    cut: dict = {}  # the model a signal stopped, and the steps it had begun

    def data() -> dict:
        return {"platform": plat.name, "settings": s.__dict__,
                "models": [r.to_dict() for r in results], "failed": failed,
                **({"interrupted_model": cut} if cut else {}),
                **interrupt.marker(interrupted)}

    with claimed(report, folder=True):
        for i, m in enumerate(models):
            ms = s
            if budget is not None:  # an equal share of what is left
                left = budget - (time.perf_counter() - started)
                ms = replace(s, budget_seconds=max(0.0, left) / (len(models) - i))
            elif quick and i == 0:  # --quick bounds a model's wall: what ran before it counts
                ms = replace(s, budget_seconds=max(0.0, s.budget_seconds
                                                   - (time.perf_counter() - started)))
            steps: list[str] = []
            try:
                with progress(f"bench {m}") as log:
                    def step(msg: str, m=m, steps=steps, log=log) -> None:
                        interrupt.check()  # a safe point: no step begins after a signal
                        steps.append(msg)
                        log(f"{m}: {msg}")

                    mb = bench_model(m, plat, ms, log=step, report_dir=report)
            except HetflowError as e:  # one model's failure is reported; the others run
                failed[m] = str(e)
                err_console.print(f"bench {m}: {e}", style="red")
                continue
            except KeyboardInterrupt:
                interrupted, cut = True, {"model": m, "steps": steps}
                break
            if interrupt.requested():  # a run inside was cut short: its figures are partial
                mb.notes["interrupted"] = interrupted = True
            results.append(mb)
            if not json_out:
                print_bench(mb)
            if report:  # after every model, so a long run that is cut short keeps its results
                write_json(report / "bench.json", data())
            if interrupted:
                break
        if report:
            write_json(report / "bench.json", data())
            err_console.print(f"wrote {report / 'bench.json'}", highlight=False)
            if interrupted:  # the page would take seconds to draw; the JSON has it all
                err_console.print("no HTML report: the bench was interrupted",
                                  style="yellow")
            else:
                write_html(report, data())
    if json_out:
        print_json(data())
    if interrupted:
        raise typer.Exit(interrupt.exit_code())
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(bench)



def write_html(report: Path, data: dict) -> None:

    try:
        page = write_report(report, data)
        err_console.print(f"wrote {page}", highlight=False)
    except HetflowError as e:  # e.g. no matplotlib: the JSON is there, say why no page
        err_console.print(f"no HTML report: {e}", style="yellow")
