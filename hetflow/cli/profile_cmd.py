"""`hetflow profile MODEL --platform ...`: measure (or estimate) per-layer times and links."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, Optional

import typer
from typer.core import TyperCommand
from rich.table import Table

from hetflow import interrupt
from hetflow.io import claimed

from hetflow.cli.common import PRECISION_HELP, TOLERANCE_HELP, check_writable, console, err_console, print_json
from hetflow.mapping.calibration import busy_slowdowns
from hetflow.mapping.from_profile import searched_elements
from hetflow.model import parse_input_shapes, resolve_model
from hetflow.model.accuracy import Tolerance
from hetflow.errors import InputError
from hetflow.platform import resolve_platform
from hetflow.platform.precision import DEFAULT_PRECISION, is_auto, precision_variants
from hetflow.platform.spec import ProcessingElement
from hetflow.profile import estimate_profile, profile_model
from hetflow.profile.deviation import (record_deviations, record_screen,
                                       screen_gpu_precisions)
from hetflow.profile.power import POWER_WINDOW_S
from hetflow.profile.table_import import import_table


def profile_summary(prof, graph) -> dict:
    """What the command reports: per element the sum of layer times against the whole model."""

    lanes = prof.calibration.get("busy_lanes", {})
    busy_fps = prof.calibration.get("busy_fps", {})
    slow = busy_slowdowns(prof, busy_fps, lanes)
    return {
        "model": prof.model_name, "platform": prof.platform_name, "estimated": prof.estimated,
        "layers": len(graph.layers), "fused": prof.meta.get("fused"),
        "method": prof.meta.get("method"), "repeats": prof.meta.get("repeats"),
        "seconds": prof.meta.get("seconds"),
        "elements": {e: {"profiled_as": prof.elements[e].get("profiled_as"),
                         "layer_sum": sum(st["median"] for st in times.values()),
                         **prof.layer_sum_vs_whole().get(e, {})}
                     for e, times in prof.layer_times.items()},
        "comm": prof.comm, "skipped": prof.meta.get("skipped", {}),
        # each element's rate with every single core and GPU running the model at once, and
        # its time per frame then over its time alone (what `hetflow map` predicts with)
        "busy": {e: {"fps": fps, "lanes": lanes.get(e, 1),
                     **({"slowdown": slow[e]} if e in slow else {})}
                 for e, fps in busy_fps.items()},
        "cpu_freq_mhz": prof.cpu_freq_mhz, "source": prof.source,
        "power": power_summary(prof.power),
    }


def power_summary(power: dict) -> dict:
    """Each part's idle watts and each element's busy watts on its own part (at each batch and
    lane count read), with the method; the parts without a counter and why."""
    return {"idle": {p: {"watts": f["watts"], "method": f["method"], "reliable": f["reliable"]}
                     for p, f in power.get("idle", {}).items()},
            "busy": {e: {key: {p: f["watts"] for p, f in entry["parts"].items()}
                         for key, entry in per.items()}
                     for e, per in power.get("busy", {}).items()},
            "missing": dict(power.get("missing", {}))}


def power_lines(power: dict) -> list[str]:
    """What the profile says of power: idle watts per part, busy watts per element, and the
    parts without a counter (their elements' power is then the platform's, modelled)."""
    lines = []
    if power["idle"]:
        lines.append("idle power: " + ", ".join(
            f"{p} {v['watts']:.1f} W ({v['method']}{'' if v['reliable'] else ', unreliable'})"
            for p, v in power["idle"].items() if v["watts"] is not None))
    for e, per in power["busy"].items():
        lines.append(f"busy power of {e}: " + "; ".join(
            f"b,k={key} " + ", ".join(f"{p} {w:.1f} W" for p, w in parts.items()
                                      if w is not None)
            for key, parts in per.items()))
    for p, why in power["missing"].items():
        lines.append(f"power of {p}: {why}; the platform's power_w is used (modelled)")
    return lines


def precision_elements(platform, setting: str, names: list[str] | None, searched: bool
                       ) -> list[ProcessingElement] | None:
    """The elements `hetflow profile --precision SETTING` measures: those of the searched
    configurations (`searched`), all, or the ones `names` (each may carry its precision,
    'cpu0@int8'), of the platform at each precision the setting allows. None: every element
    of the platform as it is (fp32 and no names)."""
    variants = precision_variants(platform, setting)
    if searched:
        return list({e.name: e for v in variants for e in searched_elements(v)}.values())
    every = {e.name: e for v in variants for e in v.all_elements()}
    if names is None:
        return None if len(variants) == 1 and variants[0] is platform else list(every.values())
    for n in names:
        if n not in every:
            raise InputError(f"--element {n}: platform {platform.name!r} at --precision "
                             f"{setting} has no such element (elements: {', '.join(every)})")
    return [every[n] for n in names]


def _default_output(model: str, platform_name: str) -> Path:
    safe = lambda s: re.sub(r"[^\w.-]+", "_", s)  # noqa: E731
    return Path(f"{safe(Path(model).stem)}.{safe(platform_name)}.profile.json")


def _import_command():
    """`hetflow profile import TABLE`: layer times measured elsewhere -> a hetflow profile."""
    sub = typer.Typer(add_completion=False)

    @sub.command("import")
    def profile_import(
        table: Path = typer.Argument(..., help="CSV (columns layer,element,ms) or JSON list of "
                                               "{layer, element, ms}"),
        model: str = typer.Option(..., "--model", "-m", help="ONNX file or zoo model name"),
        platform: str = typer.Option("auto", "--platform", "-p",
                                     help="platform YAML file, bundled name, or auto"),
        output: Optional[Path] = typer.Option(None, "-o", "--output",
                                              help="profile JSON to write "
                                                   "(default: MODEL.PLATFORM.profile.json)"),
        fuse: bool = typer.Option(True, "--fuse/--no-fuse",
                                  help="fused Conv+BN+activation layers (a per-node table is "
                                       "summed per fused layer)"),
        input_shape: Optional[list[str]] = typer.Option(None, "--input-shape",
                                                        help="NAME=1x3x224x224 for dynamic inputs"),
        json_out: bool = typer.Option(False, "--json", help="print the summary as JSON"),
    ) -> None:
        """Import per-layer times (a vendor profiler's, another tool's) as a hetflow profile."""

        check_writable(output)
        graph = resolve_model(model, parse_input_shapes(input_shape), fuse)
        plat = resolve_platform(platform)
        prof, warnings = import_table(table, graph, plat,
                                      elements=[e.name for e in searched_elements(plat)])
        out = output or _default_output(graph.name, plat.name)
        check_writable(out)
        prof.save(out)
        for w in warnings:
            err_console.print(f"warning: {w}")
        if json_out:
            print_json({**profile_summary(prof, graph), "warnings": warnings})
            return
        console.print(f"{graph.name} on {plat.name}: {len(graph.layers)} layers on "
                      f"{len(prof.layer_times)} elements imported from {table}")
        for e, times in prof.layer_times.items():
            total = sum(st["median"] for st in times.values())
            console.print(f"  {e}: layer sum {total * 1e3:.3f} ms")
        console.print(f"wrote {out}")

    return typer.main.get_command(sub)  # one command: typer gives the command itself


class _ProfileCommand(TyperCommand):
    """`hetflow profile MODEL ...`, and `hetflow profile import TABLE ...` (a MODEL named
    'import' is not a zoo model; a file of that name is given as ./import)."""

    def make_context(self, info_name, args, parent=None, **extra):
        if args and args[0] == "import":
            cmd = _import_command()
            return cmd.make_context(f"{info_name} import", list(args[1:]), parent=parent, **extra)
        return super().make_context(info_name, args, parent=parent, **extra)


def profile(
    model: str = typer.Argument(..., help="ONNX file or zoo model name"),
    platform: str = typer.Option("auto", "--platform", "-p",
                                 help="platform YAML file, bundled name, or auto (this machine)"),
    output: Optional[Path] = typer.Option(None, "-o", "--output",
                                          help="profile JSON to write "
                                               "(default: MODEL.PLATFORM.profile.json)"),
    estimate: bool = typer.Option(False, "--estimate",
                                  help="roofline estimate from nominal peak rates; measures nothing"),
    repeats: int = typer.Option(20, "--repeats", min=1, help="timed runs per layer"),
    warmup: int = typer.Option(3, "--warmup", min=0, help="untimed runs first"),
    method: Literal["isolated", "chain"] = typer.Option(
        "isolated", "--method", help="isolated: each layer repeated on a real input; chain: "
                                     "layers timed in model order (over-estimates)"),
    elements: Optional[list[str]] = typer.Option(None, "--element", "-e",
                                                 help="profile only these elements (repeatable)"),
    all_elements: bool = typer.Option(False, "--all-elements",
                                      help="every element of every configuration (default: "
                                           "those of the configurations the search uses)"),
    fuse: bool = typer.Option(True, "--fuse/--no-fuse",
                              help="profile fused Conv+BN+activation layers (as ORT runs them)"),
    comm: bool = typer.Option(True, "--comm/--no-comm", help="measure communication links"),
    contention: bool = typer.Option(True, "--contention/--no-contention",
                                    help="measure each element's slowdown while every "
                                         "single core and GPU runs the model (hetflow map "
                                         "predicts with it)"),
    power_seconds: float = typer.Option(
        POWER_WINDOW_S, "--power-seconds", min=0.0,
        help="read each part's idle power and each element's busy power from this "
             "machine's energy counters (NVML, RAPL) over windows this long (0: not read)"),
    dvfs: bool = typer.Option(False, "--dvfs-calibration",
                              help="scale times to the all-cores-busy frequency (Kang et al.)"),
    input_shape: Optional[list[str]] = typer.Option(None, "--input-shape",
                                                    help="NAME=1x3x224x224 for dynamic inputs"),
    json_out: bool = typer.Option(False, "--json", help="print the summary as JSON"),
    precision: str = typer.Option(
        "fp32", "--precision", help=PRECISION_HELP + "; each element that is not fp32 also "
                                    "runs the whole model against the fp32 reference (auto: "
                                    "a GPU at fp32 and at the first of fp16, bf16, tf32 "
                                    "within --tolerance)"),
    tolerance: Optional[str] = typer.Option(
        None, "--tolerance", help="with --precision auto: " + TOLERANCE_HELP
                                  + "; a GPU's reduced precision beyond it is not profiled"),
) -> None:
    """Profile every layer of MODEL on every processing element of a platform.

    Or `hetflow profile import TABLE -m MODEL -p PLATFORM`: times measured elsewhere.
    """

    check_writable(output)
    graph = resolve_model(model, parse_input_shapes(input_shape), fuse)
    plat = resolve_platform(platform)
    out = output or _default_output(graph.name, plat.name)
    if output is None:  # the default name, known once model and platform are
        check_writable(out)
    tol = Tolerance.parse(tolerance) if tolerance is not None else Tolerance()
    searched = elements is None and not all_elements
    elements = precision_elements(plat, precision, elements, searched)
    screened, records = {}, {}
    if searched and not estimate and is_auto(precision):
        elements, screened, records = screen_gpu_precisions(graph, elements, tol)
        for name, why in screened.items():
            err_console.print(f"hetflow: {name}: {why}", highlight=False)
    with claimed(out):
        if estimate:
            prof = estimate_profile(graph, plat, elements=elements)
        else:  # a signal ends it with what was measured, written and marked so
            if not json_out and not err_console.is_terminal:  # (a terminal gets a bar)
                err_console.print(f"hetflow: profiling {graph.name} on {plat.name} "
                                  f"({len(graph.layers)} layers)", highlight=False)
            prof = profile_model(graph, plat, elements=elements, repeats=repeats,
                                 warmup=warmup, method=method, comm=comm,
                                 contention=contention, dvfs_calibration=dvfs,
                                 skip_unavailable=searched, keep_partial=True,
                                 power_seconds=power_seconds,
                                 progress=not json_out and err_console.is_terminal)
            record_screen(prof, screened, records)
            if not prof.meta.get("interrupted"):
                record_deviations(prof, graph, elements or plat.all_elements())
        if precision != DEFAULT_PRECISION:
            prof.meta["precision"] = precision
        prof.save(out)
    summary = profile_summary(prof, graph)
    if prof.meta.get("interrupted"):
        summary.update(interrupt.marker())
        if json_out:
            print_json(summary)
        err_console.print(f"interrupted: wrote the profile measured so far to {out} (its "
                          f"meta says interrupted; profile again for a whole one)",
                          style="yellow", highlight=False)
        raise typer.Exit(interrupt.exit_code())
    if json_out:
        print_json(summary)
        return
    print_summary(prof, summary, graph, plat, repeats)
    console.print(f"wrote {out}")


def print_summary(prof, summary: dict, graph, plat, repeats: int) -> None:
    """`hetflow profile`'s tables: each element's layer sum against its whole model, the links,
    the busy run, the power read."""
    kind = "estimated" if prof.estimated else f"measured ({summary['method']}, {repeats} repeats)"
    console.print(f"{graph.name} on {plat.name}: {len(graph.layers)} layers, {kind}"
                  + (f", {summary['seconds']} s" if summary["seconds"] else ""))
    if prof.estimated:
        t = Table(title="estimated model time (sum of layer times)")
        t.add_column("element")
        t.add_column("ms", justify="right")
        for e, v in summary["elements"].items():
            t.add_row(e, f"{v['layer_sum'] * 1e3:.2f}")
    else:
        t = Table(title="sum of layer times vs whole model (medians)")
        for col in ("element", "as", "layer sum ms", "whole ms", "sum/whole"):
            t.add_column(col, justify="left" if col in ("element", "as") else "right")
        for e, v in summary["elements"].items():
            same = v["profiled_as"] in (e, None)
            whole = f"{v['whole'] * 1e3:.2f}" if "whole" in v else "-"
            ratio = f"{v['ratio']:.3f}" if "ratio" in v else "-"
            t.add_row(e, "" if same else v["profiled_as"], f"{v['layer_sum'] * 1e3:.2f}",
                      whole, ratio)
    console.print(t)
    for link, m in prof.comm.items():
        bw = f", {1 / m['b'] / 1e9:.1f} GB/s" if m["b"] > 0 else ""
        console.print(f"{link}: {m['a'] * 1e6:.1f} us + {m['b'] * 1e9:.3f} ns/byte{bw}")
    busy = summary["busy"]
    if busy:
        slow = sorted(v["slowdown"] for v in busy.values() if "slowdown" in v)
        console.print("all busy at once: " + "; ".join(
            ([f"single cores {slow[len(slow) // 2]:.2f}x their time alone (median of "
              f"{len(slow)})"] if slow else [])
            + [f"{e} x{v['lanes']} lanes {v['fps']:.1f} frames/s" for e, v in busy.items()
               if v["lanes"] > 1]))
    for line in power_lines(summary["power"]):
        console.print(line, highlight=False)
    for e, why in summary["skipped"].items():
        console.print(f"skipped {e}: {why}")


def register(app: typer.Typer) -> None:
    app.command("profile", cls=_ProfileCommand)(profile)
