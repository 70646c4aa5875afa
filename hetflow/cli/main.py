"""The `hetflow` command. Every HetflowError becomes a one-line message and its exit code."""
from __future__ import annotations

import importlib
import sys

import typer

from hetflow.errors import HetflowError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Pipelined CNN inference on heterogeneous machines (ONNX -> SDF/CSDF -> "
                       "profile -> map -> run).")

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
        app(standalone_mode=False)
    except HetflowError as e:
        print(f"hetflow: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("hetflow: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # click usage errors carry their own exit code
        import click

        if isinstance(e, click.exceptions.Exit):
            sys.exit(e.exit_code)
        if isinstance(e, click.ClickException):
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, click.exceptions.Abort):
            sys.exit(130)
        raise


if __name__ == "__main__":
    main()
