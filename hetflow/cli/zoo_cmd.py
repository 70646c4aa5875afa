"""`hetflow zoo list|export`: the built-in CNNs (generated, no download)."""
from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from hetflow.cli.common import check_writable, console, print_json
from hetflow.model import zoo


def register(app: typer.Typer) -> None:
    zoo_app = typer.Typer(no_args_is_help=True, help="Built-in CNN architectures (random weights).")
    app.add_typer(zoo_app, name="zoo")

    @zoo_app.command("list")
    def list_(json_out: bool = typer.Option(False, "--json",
                                            help="print JSON instead of a table")) -> None:
        """List the zoo's models with their input and output shapes."""

        entries = zoo.list_models()
        if json_out:
            print_json([{"name": e.name, "input_shape": e.input_shape,
                         "output_shape": e.output_shape, "description": e.description,
                         "paper_name": e.paper_name} for e in entries])
            return
        t = Table(title="hetflow zoo")
        for c in ("name", "input", "output", "description"):
            t.add_column(c)
        for e in entries:
            t.add_row(e.name, "x".join(map(str, e.input_shape)), "x".join(map(str, e.output_shape)),
                      e.description)
        console.print(t)

    @zoo_app.command("export")
    def export(name: str = typer.Argument(..., help="zoo model name (hetflow zoo list)"),
               output: Path = typer.Option(..., "-o", "--output", help="ONNX file to write")
               ) -> None:
        """Write a zoo model as an ONNX file."""

        check_writable(output)
        path = zoo.export_model(name, output)
        console.print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
