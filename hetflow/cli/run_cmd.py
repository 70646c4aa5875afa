"""`hetflow run PLAN.json`: execute a plan as a pipelined engine, check outputs, report."""
from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

import typer
from rich.table import Table

from hetflow import interrupt
from hetflow.io import claimed

from hetflow.cli.common import check_writable, console, err_console, positive, print_json, progress
from hetflow.errors import InputError
from hetflow.model.accuracy import Tolerance
from hetflow.plan.plan import Plan
from hetflow.runtime.api import load_plan_model, run_plan
from hetflow.runtime.energy import energy_line


def print_report(reports) -> None:

    t = Table(title="measured")
    for c in ("run", "frames/s", "p50 ms", "p90 ms", "p99 ms", "predicted fps", "pred/meas",
              "checked"):
        t.add_column(c, justify="left" if c == "run" else "right")
    for r in reports:
        pred = r.predicted.get("throughput") if r.predicted else None
        if r.notes.get("arrival_rate"):  # the rate was the clock's, not the plan's
            pred = None
        t.add_row(r.name, f"{r.throughput:.1f}", f"{r.latency['p50'] * 1e3:.2f}",
                  f"{r.latency['p90'] * 1e3:.2f}", f"{r.latency['p99'] * 1e3:.2f}",
                  f"{pred:.1f}" if pred else "-", f"{pred / r.throughput:.2f}" if pred else "-",
                  f"{r.checked_frames} ok" if r.checked_frames else "-")
    console.print(t)
    for r in reports:
        if r.utilisation:
            console.print(f"{r.name} utilisation: " + ", ".join(
                f"{e} {u:.0%}" for e, u in sorted(r.utilisation.items())))
        split = r.notes.get("per_element_fps") or {}
        if len(split) > 1:  # where a replica group's frames came from
            console.print(f"{r.name} frames/s delivered by: " + ", ".join(
                f"{e} {v:.1f}" for e, v in sorted(split.items(), key=lambda kv: -kv[1])))
        if r.notes.get("arrival_rate"):
            console.print(arrival_line(r), highlight=False)
        if r.energy:
            console.print(f"{r.name} {energy_line(r.energy)}{predicted_energy(r)}",
                          highlight=False)
        if not r.complete:
            console.print(f"{r.name}: interrupted after {r.frames} frames", style="yellow")


def predicted_energy(r) -> str:
    """'; predicted 0.31 J/frame (nvml): measured 1.04x it', where the plan predicted one and
    the run measured one."""
    predicted = (r.predicted or {}).get("energy_per_frame")
    measured = r.energy.get("joules_per_frame")
    if not predicted:
        return ""
    method = (r.predicted or {}).get("energy_method")
    return (f"; predicted {predicted:.4g} J/frame" + (f" ({method})" if method else "")
            + (f": measured {measured / predicted:.2f}x it" if measured is not None else ""))


def accuracy_line(accuracy: dict) -> str:
    """'at fp32, int8 over 8 random frames: logits rel L2 0.021 (worst), top-1 agrees 8/8 ...'."""
    parts = []
    for o in accuracy["outputs"]:
        rel = o["rel_l2_worst"]
        part = f"{o['name']} rel L2 {'inf' if rel is None else f'{rel:.3g}'} (worst)"
        if o["top1_agreement"] is not None:
            part += f", top-1 agrees {o['top1_agreement']:.0%}"
        parts.append(part)
    tol = ", ".join(f"{k}={v:g}" for k, v in accuracy["tolerance"].items() if v is not None)
    return (f"deviation from the fp32 reference at {', '.join(accuracy['precisions'])} over "
            f"{accuracy['frames']} {accuracy['inputs']}: {'; '.join(parts)} (tolerance {tol})")


def arrival_line(r) -> str:
    """Whether a plan fed on a clock kept up with it: frames it could not take in time queue,
    and their latency grows with the run."""
    rate, predicted = r.notes["arrival_rate"], r.predicted or {}
    cap, lat = predicted.get("throughput"), predicted.get("latency")
    kept = r.throughput >= 0.98 * rate
    line = (f"{r.name}: frames arrived at {rate:.1f} frames/s and left at {r.throughput:.1f}: "
            + ("it kept up" if kept else "it fell behind, frames queued"))
    at = predicted.get("at_rate") or {}
    if at.get("latency_p50") and abs(at["rate"] - rate) <= 0.01 * rate:
        p50 = r.latency["p50"]
        line += (f" (predicted at that rate: p50 {at['latency_p50'] * 1e3:.2f} ms, measured "
                 f"{p50 * 1e3:.2f} ms, pred/meas {at['latency_p50'] / p50:.2f})")
    elif cap:
        line += f" (predicted: {cap:.1f} frames/s at most"
        line += (f"; latency {lat * 1e3:.2f} ms at its own rate; `hetflow map --rate "
                 f"{rate:g}` predicts it at this rate)"
                 if isinstance(lat, (int, float)) and lat < float("inf") else ")")
    return line


def register(app: typer.Typer) -> None:
    @app.command()
    def run(
        plan_path: Path = typer.Argument(..., metavar="PLAN.json", help="plan from hetflow map"),
        frames: int = typer.Option(500, "--frames", "-n", min=2,
                                   help="frames to stream through the pipeline"),
        warmup: int = typer.Option(50, "--warmup", min=0,
                                   help="first frames left out of the measurements (at most a "
                                        "quarter of --frames)"),
        input_spec: str = typer.Option("random", "--input",
                                        help="random, an .npz file, or a folder of images"),
        check: Literal["first", "all", "none"] = typer.Option(
            "first", "--check", help="frames checked against the reference run: the first 8, "
                                     "all, or none"),
        trace: Optional[Path] = typer.Option(None, "--trace", help="write a Chrome trace JSON"),
        model: Optional[str] = typer.Option(None, "--model", help="model path if it moved"),
        json_out: bool = typer.Option(False, "--json",
                                      help="print the report as JSON instead of a table"),
        stall_timeout: float = typer.Option(30.0, "--stall-timeout", callback=positive,
                                            help="seconds without a completed frame before the "
                                                 "run is stopped as stalled"),
        engine: Literal["local", "ray"] = typer.Option("local", "--engine",
                                                       help="local (threads) or ray"),
        address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address"),
        rate: Optional[float] = typer.Option(None, "--rate", callback=positive,
                                             help="frames arrive at this many per second, as "
                                                  "from a camera; latency counts from each "
                                                  "frame's arrival (default: as fast as the "
                                                  "plan takes them)"),
        schedule: bool = typer.Option(False, "--schedule",
                                      help="print each element's compiled actions (receive, "
                                           "fire, send, deliver) for its first rounds and "
                                           "exit without running"),
        tolerance: Optional[str] = typer.Option(
            None, "--tolerance", help="how far outputs may be from the fp32 reference where an "
                                      "element runs another precision, e.g. "
                                      "'rel_l2=0.02,top1_flips=0' (default: the plan's, else "
                                      "rel_l2=0.05,top1_flips=0); fp32 plans match to a few ulps"),
    ) -> None:
        """Run a plan's CSDF application on this machine; outputs are checked in order.

        Exit code 1 when the run fails (a stall, an output that differs from the reference),
        130 when interrupted (after reporting the frames measured so far)."""

        if address and engine != "ray":
            raise InputError("--address goes with --engine ray")
        tol = Tolerance.parse(tolerance) if tolerance is not None else None
        check_writable(trace)
        plan = Plan.load(plan_path)
        if schedule:  # the schedule is a function of the plan alone: no model, no sessions
            from hetflow.plan.program import describe

            typer.echo("\n".join(describe(plan, rounds=3)))
            return
        graph = load_plan_model(plan, model)
        if warmup > frames // 4:
            err_console.print(f"--warmup {warmup} is more than a quarter of --frames {frames}: "
                              f"the first {frames // 4} frames are left out", highlight=False)
        with claimed(trace), progress("preparing sessions ...", quiet=json_out) as log:
            report = run_plan(plan, graph, frames, warmup, input_spec, check,
                              trace_path=trace, stall_timeout=stall_timeout, progress=log,
                              engine=engine, address=address, rate=rate, tolerance=tol)
        if json_out:
            print_json({**report.to_dict(), **interrupt.marker(not report.complete)})
        else:
            print_report([report])
            if report.accuracy:
                console.print(accuracy_line(report.accuracy), highlight=False)
            if trace and Path(trace).exists():
                console.print(f"wrote {trace}")
        if not report.complete:
            raise typer.Exit(interrupt.exit_code())
