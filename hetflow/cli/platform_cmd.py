"""`hetflow platform detect|show|configs`: describe machines and their PE configurations."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from hetflow.io import atomic_write_text

from hetflow.cli.common import check_writable, console, print_json
import itertools
from hetflow.platform import (
    configurations,
    count_configurations,
    detect_platform,
    dump_platform,
    resolve_platform,
)

platform_app = typer.Typer(no_args_is_help=True, help="Describe machines: detect this one, show a "
                           "description, list processing-element configurations.")

PLATFORM_ARG = typer.Argument(..., help="platform YAML file, bundled name (e.g. jetson_tx2), or auto")


def _num(x: float | None, fmt: str = "{:g}") -> str:
    return "-" if x is None else fmt.format(x)


@platform_app.command("detect")
def detect(output: Optional[Path] = typer.Option(None, "-o", "--output",
                                                 help="write the YAML here instead of printing it"),
           cluster: Optional[str] = typer.Option(None, "--cluster",
                                                 help="a running Ray cluster (ray://ADDR or auto): "
                                                      "describe every node and measure the links")
           ) -> None:
    """Detect this machine's cores, clusters (by max frequency) and CUDA GPUs, as platform YAML."""

    check_writable(output)
    if cluster is not None:
        from hetflow.platform.cluster import dump_cluster
        from hetflow.profile.clusters import detect_cluster

        text = dump_cluster(detect_cluster(cluster))
    else:
        text = dump_platform(detect_platform())
    if output is None:
        print(text, end="")
        return
    atomic_write_text(output, text)
    console.print(f"wrote {output}")


@platform_app.command("show")
def show(platform: str = PLATFORM_ARG,
         json_out: bool = typer.Option(False, "--json", help="print JSON instead of tables")) -> None:
    """Show a platform: clusters, GPUs, accelerators, default elements, configuration count."""

    p = resolve_platform(platform)
    elements = p.elements()
    if json_out:
        print_json({**p.to_dict(), "platform_hash": p.platform_hash,
                    "default_elements": [e.to_dict() for e in elements],
                    "configurations": count_configurations(p)})
        return
    console.print(Text.assemble((p.name, "bold"),
                                f"  {p.description}  (hash {p.platform_hash[:12]})"))
    t = Table(title="CPU clusters")
    for col in ("cluster", "cores", "core type", "max MHz", "GFLOP/s/core*", "GB/s*", "W/core*"):
        t.add_column(col)
    for c in p.clusters:
        free = p.free_cores(c)
        cores = ",".join(map(str, c.cores)) + ("" if len(free) == len(c.cores)
                                               else f" ({len(c.cores) - len(free)} driving or staging for devices)")
        t.add_row(c.name, cores, c.core_type or "-", _num(c.max_freq_mhz),
                  _num(c.peak_gflops_per_core), _num(c.mem_gbps), _num(c.power_w_per_core))
    console.print(t)
    if p.gpus or p.accelerators:
        t = Table(title="Devices")
        for col in ("element", "kind", "model", "driving core", "staging cores", "GFLOP/s*", "GB/s*", "W*", "backend"):
            t.add_column(col)
        for g in p.gpus:
            t.add_row(g.element_name, "gpu", g.name, str(g.driver_core),
                      ",".join(map(str, g.staging_cores)) or "-", _num(g.peak_gflops),
                      _num(g.mem_gbps), _num(g.power_w), g.backend or "default")
        for a in p.accelerators:
            model = a.model or "-"
            if a.speed_factor:
                model += f" ({a.speed_factor:g}x {a.relative_to})"
            t.add_row(a.name, "accel", model, _num(a.driver_core), "-", _num(a.peak_gflops),
                      _num(a.mem_gbps), _num(a.power_w), a.backend or "none")
        console.print(t)
    console.print("* nominal estimates, used by estimated profiles only")
    console.print(f"default elements: {', '.join(e.name for e in elements)}")
    console.print(f"{count_configurations(p)} PE configurations "
                  f"(hetflow platform configs {platform})")


@platform_app.command("configs")
def configs(platform: str = PLATFORM_ARG,
            limit: int = typer.Option(50, min=0, help="configurations to list (0: all)"),
            json_out: bool = typer.Option(False, "--json", help="print JSON instead of a table")
            ) -> None:
    """List the PE configurations (Kang et al.): each cluster split into core groups."""


    p = resolve_platform(platform)
    total = count_configurations(p)
    shown = configurations(p) if limit <= 0 else itertools.islice(configurations(p), limit)
    if json_out:
        print_json({"platform": p.name, "count": total,
                    "configurations": [{"label": c.label, "elements": [e.name for e in c.elements]}
                                       for c in shown]})
        return
    t = Table(title=f"{p.name}: {total} PE configurations")
    t.add_column("#", justify="right")
    t.add_column("configuration")
    t.add_column("elements")
    n = 0
    for i, c in enumerate(shown):
        t.add_row(str(i), c.label, " ".join(e.name for e in c.elements))
        n += 1
    console.print(t)
    if n < total:
        console.print(f"... {total - n} more (--limit 0 lists all)")


def register(app: typer.Typer) -> None:
    app.add_typer(platform_app, name="platform")
