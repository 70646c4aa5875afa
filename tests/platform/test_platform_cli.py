import json

import yaml
from typer.testing import CliRunner

from hetflow.cli.main import app
from hetflow.errors import InputError
from hetflow.platform import load_platform

runner = CliRunner()


def test_detect_writes_a_loadable_yaml(tmp_path):
    out = tmp_path / "here.yaml"
    result = runner.invoke(app, ["platform", "detect", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert load_platform(out).cores
    printed = runner.invoke(app, ["platform", "detect"])
    assert yaml.safe_load(printed.output)["clusters"]


def test_show_and_configs():
    result = runner.invoke(app, ["platform", "show", "jetson_tx2", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["configurations"] == 6 and info["platform_hash"]
    assert [e["name"] for e in info["default_elements"]] == ["cpu1-2", "cpu0,3-4", "gpu0"]
    table = runner.invoke(app, ["platform", "show", "khadas_vim3"])
    assert table.exit_code == 0 and "Mali-G52" in table.output
    result = runner.invoke(app, ["platform", "configs", "khadas_vim3", "--json"])
    assert json.loads(result.output)["count"] == 5
    table = runner.invoke(app, ["platform", "configs", "galaxy_s9", "--limit", "3"])
    assert table.exit_code == 0 and "12 more" in table.output


def test_unknown_platform_is_an_input_error():
    result = runner.invoke(app, ["platform", "show", "no_such_board"])
    assert isinstance(result.exception, InputError)
    assert "bundled: " in str(result.exception)
