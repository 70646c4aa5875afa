"""The `hetflow` command. Exit codes: 0 when everything asked succeeded, 2 for bad input (a
HetflowError with exit_code 2, a usage error), 1 for a run that failed, 130 for Ctrl-C. Every
HetflowError becomes a one-line message."""
from __future__ import annotations

import importlib
import sys

import typer

from hetflow.errors import HetflowError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},  # subcommands inherit
                  help="Pipelined CNN inference on heterogeneous machines (ONNX -> SDF/CSDF -> "
                       "profile -> map -> run).")


def _print_version(value: bool) -> None:
    if value:
        from hetflow import __version__

        print(f"hetflow {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", is_eager=True,
                                          callback=_print_version,
                                          help="Print hetflow's version and exit.")) -> None:
    pass

# Each command module exposes register(app); a module that is not there yet is skipped.
COMMAND_MODULES = ["inspect_cmd", "zoo_cmd", "platform_cmd", "profile_cmd", "map_cmd",
                   "run_cmd", "bench_cmd", "multi_cmd"]
for _name in COMMAND_MODULES:
    try:
        _mod = importlib.import_module(f"hetflow.cli.{_name}")
    except ModuleNotFoundError as e:
        if e.name != f"hetflow.cli.{_name}":
            raise
        continue
    _mod.register(app)


def main() -> None:
    try:
        # not standalone: typer returns the code of a typer.Exit, and turns Ctrl-C inside a
        # command into 130, instead of exiting itself
        code = app(standalone_mode=False)
        if code == 130:
            print("hetflow: interrupted", file=sys.stderr)
        if isinstance(code, int) and code:
            sys.exit(code)
    except HetflowError as e:
        print(f"hetflow: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("hetflow: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # usage errors carry their own exit code and message
        # duck-typed: typer >= 0.20 raises its own vendored copies of click's exceptions
        name = type(e).__name__
        if name == "Exit":
            sys.exit(getattr(e, "exit_code", 0))
        if name == "Abort":
            sys.exit(130)
        if callable(getattr(e, "show", None)) and isinstance(getattr(e, "exit_code", None), int):
            e.show()
            sys.exit(e.exit_code)
        raise


if __name__ == "__main__":
    main()
