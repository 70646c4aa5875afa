"""Options are validated by the parser (exit 2 before any work), every option says what it is
for, options with a fixed set of values list them, and -h / --version work."""
import pytest
import typer

from hetflow import __version__
from hetflow.cli.main import app
from hetflow.mapping.strategies.base import REGISTRY


def all_commands(group, path=()):
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            yield from all_commands(cmd, path + (name,))
        else:
            yield " ".join(path + (name,)), cmd


COMMANDS = dict(all_commands(typer.main.get_command(app)))


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_and_argument_has_help(name):
    missing = [p.name for p in COMMANDS[name].params if not getattr(p, "help", None)]
    assert not missing, f"hetflow {name}: no help for {missing}"


@pytest.mark.parametrize("args, option", [
    (["run", "p.json", "--warmup", "-30"], "--warmup"),
    (["run", "p.json", "--frames", "1"], "--frames"),
    (["run", "p.json", "--stall-timeout", "0"], "--stall-timeout"),
    (["run", "p.json", "--check", "some"], "--check"),
    (["run", "p.json", "--engine", "mpi"], "--engine"),
    (["map", "m.onnx", "--profile", "p.json", "--strategy", "nosuch"], "--strategy"),
    (["map", "m.onnx", "--profile", "p.json", "--capacity", "0"], "--capacity"),
    (["map", "m.onnx", "--profile", "p.json", "--max-batch", "0"], "--max-batch"),
    (["map", "m.onnx", "--profile", "p.json", "--rate", "0"], "--rate"),
    (["map", "m.onnx", "--profile", "p.json", "--batch-wait-ms", "-1"], "--batch-wait-ms"),
    (["profile", "m.onnx", "--repeats", "0"], "--repeats"),
    (["profile", "m.onnx", "--warmup", "-1"], "--warmup"),
    (["profile", "m.onnx", "--method", "guess"], "--method"),
    (["map-multi", "m.onnx:period=2ms", "--algorithm", "ga"], "--algorithm"),
    (["map-multi", "m.onnx:period=2ms", "--generations", "0"], "--generations"),
    (["run-multi", "p.json", "--max-in-flight", "0"], "--max-in-flight"),
    (["run-multi", "p.json", "--engine", "mpi"], "--engine"),
    (["inspect", "m.onnx", "--limit", "-1"], "--limit"),
])
def test_out_of_range_or_unknown_values_are_usage_errors(hetflow, args, option):
    code, out, err = hetflow(*args)
    assert code == 2 and f"Invalid value for '{option}'" in err and "Traceback" not in err


def test_strategy_options_list_the_registered_strategies(hetflow):
    for args in (["map", "-h"], ["bench", "-h"]):
        code, out, err = hetflow(*args)
        assert code == 0
        assert all(name in " ".join(out.split()) for name in REGISTRY)


def test_fixed_choices_are_listed(hetflow):
    code, out, err = hetflow("run", "--help")
    assert code == 0 and "first|all|none" in out and "local|ray" in out


@pytest.mark.parametrize("args", [["-h"], ["--help"], ["run", "-h"], ["platform", "detect", "-h"],
                                  ["zoo", "export", "-h"]])
def test_h_is_help(hetflow, args):
    code, out, err = hetflow(*args)
    assert code == 0 and "Usage:" in out


def test_version(hetflow):
    code, out, err = hetflow("--version")
    assert code == 0 and out == f"hetflow {__version__}\n"
