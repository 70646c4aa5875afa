import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetflow.errors import InputError
from hetflow.multi.spec import AppSpec, by_priority, check_specs, parse_app_spec, parse_app_specs, parse_period


def test_parse_a_full_spec():
    s = parse_app_spec("models/A.onnx:period=20ms:priority=1:profile=p.json:name=faces")
    assert s == AppSpec("models/A.onnx", 0.02, 1, "faces", "p.json")


def test_defaults_name_from_the_model_and_priority_from_the_position():
    s = parse_app_spec("squeezenet1_0:period=33ms", position=3)
    assert (s.name, s.priority, s.profile) == ("squeezenet1_0", 3, None)


@pytest.mark.parametrize("text, seconds", [("20ms", 0.02), ("0.5s", 0.5), ("800us", 8e-4),
                                           ("1e1ms", 0.01), (" 33 ms", 0.033)])
def test_period_units(text, seconds):
    assert parse_period(text) == pytest.approx(seconds)


@given(st.floats(1e-3, 1e5))
def test_period_in_ms_round_trips(ms):
    assert parse_period(f"{ms!r}ms") == pytest.approx(ms * 1e-3)


@pytest.mark.parametrize("text, match", [
    ("A.onnx:period=0ms", "must be positive"),
    ("A.onnx:period=-5ms", "must be positive"),
    ("A.onnx:period=20", "with a unit"),
    ("A.onnx:period=fast", "with a unit"),
    ("A.onnx:priority=1", "no period"),
    ("A.onnx:period=20ms:prio=1", "unknown key 'prio'"),
    ("A.onnx:period=20ms:priority=high", "not an integer"),
    ("A.onnx:period=20ms:period=30ms", "period given twice"),
    ("A.onnx:20ms", "not key=value"),
    (":period=20ms", "no model"),
])
def test_bad_specs_give_one_line_errors(text, match):
    with pytest.raises(InputError, match=match) as e:
        parse_app_spec(text)
    assert "\n" not in str(e.value)


def test_a_model_given_twice(tmp_path):
    f = tmp_path / "A.onnx"
    f.write_bytes(b"x")
    with pytest.raises(InputError, match="given twice"):
        parse_app_specs([f"{f}:period=20ms", f"{tmp_path}/../{tmp_path.name}/A.onnx:period=30ms:name=B"])
    with pytest.raises(InputError, match="model mobilenet_v2 is given twice"):
        parse_app_specs(["mobilenet_v2:period=20ms", "mobilenet_v2:period=40ms:name=other"])


def test_a_priority_clash_names_both_applications():
    with pytest.raises(InputError, match="priority clash: applications A and B both have priority 1"):
        parse_app_specs(["A.onnx:period=20ms:priority=1", "B.onnx:period=30ms:priority=1"])
    # the default priority is the position, so an explicit one can clash with it too
    with pytest.raises(InputError, match="priority clash"):
        parse_app_specs(["A.onnx:period=20ms", "B.onnx:period=30ms:priority=1"])


def test_two_apps_with_one_name():
    with pytest.raises(InputError, match="two applications are named 'A'"):
        parse_app_specs(["x/A.onnx:period=20ms", "y/A.onnx:period=30ms"])


def test_no_application():
    with pytest.raises(InputError, match="no applications"):
        check_specs([])


def test_by_priority():
    specs = parse_app_specs(["A.onnx:period=20ms:priority=5", "B.onnx:period=30ms:priority=2"])
    assert [s.name for s in by_priority(specs)] == ["B", "A"]
