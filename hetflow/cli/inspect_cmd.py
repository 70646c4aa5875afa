"""`hetflow inspect MODEL`: layers, shapes, FLOPs, totals and the SDF summary."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from hetflow.cli.common import check_writable, console, fmt_si, print_json
from hetflow.dataflow.sdf import cnn_to_sdf
from hetflow.errors import InputError
from hetflow.model import parse_input_shapes, resolve_model


def inspect_summary(graph) -> dict:

    sdf = cnn_to_sdf(graph)
    unknown = [l.name for l in graph.layers if l.flops is None]
    return {
        "model": graph.name, "source": graph.source, "model_hash": graph.model_hash,
        "inputs": [graph.tensors[t].to_dict() for t in graph.inputs],
        "outputs": [graph.tensors[t].to_dict() for t in graph.outputs],
        "layers": [{**l.to_dict(), "output_shapes": [list(graph.tensors[t].shape) for t in l.outputs]}
                   for l in graph.layers],
        "totals": {"layers": len(graph.layers), "edges": len(graph.edges),
                   "flops": graph.total_flops, "flops_unknown_layers": unknown,
                   "param_bytes": graph.total_param_bytes,
                   "activation_bytes": sum(graph.tensors[e.tensor].nbytes for e in graph.edges)},
        "sdf": {"actors": len(sdf.actors), "channels": len(sdf.channels),
                "homogeneous": all(c.production == c.consumption for c in sdf.channels),
                "tokens_per_iteration": sum(c.production[0] for c in sdf.channels)},
    }


def _layer_times(prof, graph, element: Optional[str]):
    """The profile's time of each layer on `element` (the profile's only one by default)."""

    prof.check_matches(graph)
    elements = sorted(prof.layer_times)
    if element is None:
        if len(elements) != 1:
            raise InputError(f"profile {prof.source} times {len(elements)} elements "
                             f"({', '.join(elements)}); say which with --element")
        element = elements[0]
    if element not in prof.layer_times:
        raise InputError(f"profile {prof.source} has no element {element!r} (it has "
                         f"{', '.join(elements) or 'none'})")
    return lambda layer: prof.layer_time(layer, element)


def register(app: typer.Typer) -> None:
    @app.command()
    def inspect(
        model: str = typer.Argument(..., help="ONNX file or zoo model name"),
        json_out: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
        sdf3: Optional[Path] = typer.Option(None, "--sdf3", help="also write the SDF graph as SDF3 XML"),
        profile: Optional[Path] = typer.Option(None, "--profile",
                                               help="with --sdf3: execution times from this "
                                                    "profile (else every time is 0)"),
        element: Optional[str] = typer.Option(None, "--element",
                                              help="with --profile: the element whose layer "
                                                   "times are written (needed if it has several)"),
        fuse: bool = typer.Option(True, "--fuse/--no-fuse",
                                  help="fuse Conv+BatchNorm+activation chains, as profile, map and "
                                       "bench do (--no-fuse: one layer per ONNX node)"),
        input_shape: Optional[list[str]] = typer.Option(None, "--input-shape",
                                                        help="NAME=1x3x224x224 for dynamic inputs"),
        limit: int = typer.Option(40, min=0, help="layers to list in the table (0: all)"),
    ) -> None:
        """Print the layers (operator, shapes, FLOPs), totals and the SDF summary of a model."""

        check_writable(sdf3)
        if (profile is not None or element is not None) and sdf3 is None:
            raise typer.BadParameter("--profile and --element only set the times --sdf3 writes",
                                     param_hint="--profile")
        if element is not None and profile is None:
            raise typer.BadParameter("--element needs --profile", param_hint="--element")
        layer_time = None
        if profile is not None:
            from hetflow.profile.profile import Profile

            prof = Profile.load(profile)
            fuse = bool(prof.meta.get("fused", fuse))
        graph = resolve_model(model, parse_input_shapes(input_shape), fuse)
        if profile is not None:
            layer_time = _layer_times(prof, graph, element)
        info = inspect_summary(graph)
        if sdf3 is not None:
            from hetflow.dataflow.sdf import cnn_to_sdf
            from hetflow.dataflow.sdf3 import write_sdf3

            write_sdf3(cnn_to_sdf(graph, layer_time), sdf3)
        if json_out:
            print_json(info)
            return
        t = Table(title=f"{graph.name}: {len(graph.layers)} layers", show_lines=False)
        for col in ("#", "layer", "op", "output shape", "FLOPs", "params"):
            t.add_column(col, justify="right" if col in ("#", "FLOPs", "params") else "left")
        shown = graph.layers if limit <= 0 else graph.layers[:limit]
        for i, (l, d) in enumerate(zip(shown, info["layers"])):
            t.add_row(str(i), l.name, l.op_type, "x".join(map(str, d["output_shapes"][0])) if
                      d["output_shapes"] else "-", fmt_si(l.flops), fmt_si(l.param_bytes, "B"))
        console.print(t)
        if limit and len(graph.layers) > limit:
            console.print(f"... {len(graph.layers) - limit} more layers (--limit 0 lists all)")
        tot = info["totals"]
        ins = ", ".join(f"{d['name']} {d['shape']}" for d in info["inputs"])
        outs = ", ".join(f"{d['name']} {d['shape']}" for d in info["outputs"])
        console.print(f"inputs: {ins}; outputs: {outs}")
        console.print(f"total: {fmt_si(tot['flops'], 'FLOP')}, parameters {fmt_si(tot['param_bytes'], 'B')}, "
                      f"activations on edges {fmt_si(tot['activation_bytes'], 'B')}"
                      + (f"; FLOPs unknown for {len(tot['flops_unknown_layers'])} layer(s)"
                         if tot["flops_unknown_layers"] else ""))
        s = info["sdf"]
        console.print(f"SDF (Algorithm 1): {s['actors']} actors, {s['channels']} channels, "
                      f"{'homogeneous' if s['homogeneous'] else 'multi-rate'}, repetition vector all 1, "
                      f"{fmt_si(s['tokens_per_iteration'])} tokens per iteration")
        if sdf3:
            console.print(f"wrote {sdf3}")
