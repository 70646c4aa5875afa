"""Every output path is checked before any work: one that cannot be written gives a one-line
error naming it and exit 2. The inputs named here do not exist, so an error about the output
(not about the input) shows the check came first; no file is left behind."""
import pytest

from hetflow.cli.common import check_writable
from hetflow.errors import InputError

BAD = "/proc/hetflow-test/x.json"  # /proc takes no new files, even from root


@pytest.mark.parametrize("args", [
    ["map", "nosuch.onnx", "--profile", "nosuch.json", "-o", BAD],
    ["map", "nosuch.onnx", "--profile", "nosuch.json", "--pareto", BAD],
    ["profile", "nosuch.onnx", "-o", BAD],
    ["platform", "detect", "-o", BAD],
    ["map-multi", "nosuch.onnx:period=2ms", "-o", BAD],
    ["run", "nosuch.plan.json", "--trace", BAD],
    ["run-multi", "nosuch.multi.json", "-o", BAD],
    ["run-multi", "nosuch.multi.json", "--trace", BAD],
    ["inspect", "nosuch.onnx", "--sdf3", BAD],
    ["bench", "resnet18", "--report", BAD],
    ["zoo", "export", "resnet18", "-o", BAD],
])
def test_an_unwritable_output_is_refused_first(hetflow, args):
    code, out, err = hetflow(*args)
    assert code == 2
    assert err.startswith(f"hetflow: error: {BAD}: cannot write files in /proc")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_folder_where_a_file_goes_and_a_file_where_a_folder_goes(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(InputError, match="is not a folder"):
        check_writable(tmp_path / "f" / "x.json")
    with pytest.raises(InputError, match="it exists and is a folder"):
        check_writable(tmp_path)
    with pytest.raises(InputError, match="it exists and is not a folder"):
        check_writable(tmp_path / "f", folder=True)


def test_a_writable_path_is_accepted_and_the_probe_leaves_nothing(tmp_path):
    check_writable(tmp_path / "new" / "deeper" / "x.json", None)
    check_writable(tmp_path / "report", folder=True)
    assert list(tmp_path.iterdir()) == []  # folders are made by the writer, not by the check
