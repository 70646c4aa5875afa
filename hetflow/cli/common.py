"""Helpers shared by the CLI commands: consoles, progress, output checks, JSON output, atomic
file writes."""
from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import typer
from rich.console import Console
from rich.text import Text

from hetflow.errors import InputError
from hetflow.io import dumps
from hetflow.mapping.strategies.base import REGISTRY

# markup off: model-derived names and error messages (ONNX layer names such as
# "[/features/features.0/Conv]") must print literally, not be read as rich markup; colour goes
# through style= instead
console = Console(markup=False)
if not console.is_terminal:  # piped or logged: keep table rows on one line
    console = Console(width=200, markup=False)
err_console = Console(stderr=True, markup=False, soft_wrap=True)  # messages: one line each


PRECISION_HELP = ("number formats of the elements: fp32 (default), a setting such as "
                  "'gpu=fp16 cpu=int8' (a kind, a GPU such as gpu0 or a cluster by name), or "
                  "auto: every precision each element can run")
TOLERANCE_HELP = ("how far outputs may be from the fp32 reference at another precision, e.g. "
                  "'rel_l2=0.02,top1_flips=0' (default rel_l2=0.05,top1_flips=0)")
MAX_BATCH_HELP = ("frames a firing takes at most, on every element (1: one frame at a time, "
                  "as a stream that cannot wait for a batch needs); default: every batch "
                  "the profile measured")


def check_writable(*paths: str | os.PathLike | None, folder: bool = False) -> None:
    """Refuse, before any work is done, an output path that cannot be written (InputError:
    one line naming the path, exit 2). `folder`: the paths are folders to create or fill.
    Probes with a real temporary file, since os.access says yes to root even in /proc."""
    for p in paths:
        if p is None:
            continue
        path = Path(p)
        if path.exists() and path.is_dir() != folder:
            raise InputError(f"{path}: cannot write {'a folder' if folder else 'a file'} here: "
                             f"it exists and is {'not ' if folder else ''}a folder")
        existing = path if folder else path.parent
        while not existing.exists():  # the folders the writer would create
            existing = existing.parent
        if not existing.is_dir():
            raise InputError(f"{path}: cannot write here: {existing} is not a folder")
        try:
            fd, probe = tempfile.mkstemp(prefix=".hetflow-probe.", dir=existing)
        except OSError as e:
            raise InputError(f"{path}: cannot write files in {existing} "
                             f"({e.strerror or e})") from None
        os.close(fd)
        os.unlink(probe)


@contextmanager
def progress(title: str, quiet: bool = False) -> Iterator[Callable[[str], None]]:
    """Progress of a long step, as a function taking each message: a spinner on a terminal,
    else plain lines on stderr (a spinner prints nothing into a pipe or a log for minutes).
    `quiet`: no lines off a terminal (for --json, whose reader is a program)."""
    if err_console.is_terminal:
        with err_console.status(Text(title)) as status:  # Text: a str would be read as markup
            yield lambda msg: status.update(Text(msg))
        return
    if quiet:
        yield lambda msg: None
        return

    def line(msg: str) -> None:
        print(f"hetflow: {msg}", file=sys.stderr, flush=True)

    line(title)
    yield line


def positive(value: float | None) -> float | None:
    """typer callback for options that must be greater than 0 (typer's min= allows the bound)."""
    if value is not None and value <= 0:
        raise typer.BadParameter(f"{value} is not greater than 0")
    return value


def print_json(data: Any) -> None:
    """Strict JSON on stdout (a figure that is not finite as null)."""
    print(dumps(data), flush=True)


def fmt_si(x: float | None, unit: str = "") -> str:
    if x is None:
        return "?"
    for f, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= f:
            return f"{x / f:.2f} {p}{unit}"
    return f"{x:.0f} {unit}".rstrip()


def strategy_names() -> list[str]:

    return sorted(REGISTRY)


def strategy_name(value: str) -> str:
    """typer callback: a search strategy's name, checked before any work."""
    if value not in strategy_names():
        raise typer.BadParameter(f"unknown strategy {value!r} (known: "
                                 f"{', '.join(strategy_names())})")
    return value


def strategy_list(value: str) -> list[str]:
    """typer callback: comma-separated strategy names, each checked before any work."""
    names = [x.strip() for x in value.split(",") if x.strip()]
    if not names:
        raise typer.BadParameter("name at least one strategy")
    for n in names:
        strategy_name(n)
    return names
