"""The `hetflow` command. Exit codes: 0 when everything asked succeeded, 2 for bad input (a
HetflowError with exit_code 2, a usage error), 1 for a run that failed, 130 for SIGINT
(Ctrl-C) and 143 for SIGTERM (hetflow.interrupt: what was measured is written first, marked
interrupted). Every HetflowError becomes a one-line message."""
from __future__ import annotations

import importlib
import logging
import sys

import typer

from hetflow.errors import HetflowError
from hetflow import interrupt

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


class _Notices(logging.Handler):
    """hetflow's warnings (a model input taken as batch 1) as one line each on stderr; the
    stream looked up as each is written, as the print()s of the commands are."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"hetflow: {record.getMessage()}", file=sys.stderr)


def _say_notices() -> None:
    log = logging.getLogger("hetflow")
    if not any(isinstance(h, _Notices) for h in log.handlers):
        log.addHandler(_Notices(logging.WARNING))


def main(at_once: bool = True) -> None:
    """The console script. After a signal the process leaves at once once its results are
    written (interrupt.finish); `at_once=False` raises SystemExit instead, for a caller in
    this process (a test)."""

    _say_notices()
    with interrupt.handled():  # a second signal while the results are written exits at once
        try:
            code = _run()
        except KeyboardInterrupt:  # a signal that reached no command's own handling
            code = 130
        if interrupt.requested():  # whatever the command returned, a signal stopped it
            print(f"hetflow: interrupted ({interrupt.signal_name()})", file=sys.stderr)
            interrupt.finish(interrupt.exit_code(), at_once)
    if code == 130:
        print("hetflow: interrupted", file=sys.stderr)
    if code:
        sys.exit(code)


def _run() -> int:
    """The command's exit code; KeyboardInterrupt passes through."""
    try:
        # not standalone: typer returns the code of a typer.Exit, and turns Ctrl-C inside a
        # command into 130, instead of exiting itself
        code = app(standalone_mode=False)
        return code if isinstance(code, int) else 0
    except HetflowError as e:
        print(f"hetflow: error: {e}", file=sys.stderr)
        return e.exit_code
    except Exception as e:  # usage errors carry their own exit code and message
        # duck-typed: typer >= 0.20 raises its own vendored copies of click's exceptions
        name = type(e).__name__
        if name == "Exit":
            return getattr(e, "exit_code", 0)
        if name == "Abort":
            return 130
        if callable(getattr(e, "show", None)) and isinstance(getattr(e, "exit_code", None), int):
            e.show()
            return e.exit_code
        raise


if __name__ == "__main__":
    main()
