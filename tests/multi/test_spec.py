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


def test_a_model_given_many_times_under_distinct_names():
    specs = parse_app_specs([f"resnet18:period=33ms:name=cam{i}" for i in range(1, 9)])
    assert [s.name for s in specs] == [f"cam{i}" for i in range(1, 9)]
    assert [s.priority for s in specs] == list(range(1, 9))
    with pytest.raises(InputError, match="two applications are named 'cam1'"):
        parse_app_specs(["resnet18:period=33ms:name=cam1", "resnet18:period=40ms:name=cam1"])


def test_streams_and_deadline():
    s = parse_app_spec("resnet18:period=33ms:deadline=100ms:streams=120", position=2)
    assert (s.period, s.deadline, s.streams, s.priority) == (0.033, 0.1, 120, 2)
    assert s.relative_deadline == 0.1
    assert s.stream_names()[:2] == ["resnet18/0", "resnet18/1"] and len(s.stream_names()) == 120
    one = parse_app_spec("resnet18:period=33ms")
    assert (one.deadline, one.relative_deadline, one.streams) == (None, 0.033, 1)
    assert one.stream_names() == ["resnet18"]


@pytest.mark.parametrize("text, match", [
    ("cam.onnx:period=20ms:deadline=0ms", "application cam: deadline=0ms: a deadline must be "
                                          "positive"),
    ("cam.onnx:period=20ms:deadline=-5ms", "application cam: deadline=-5ms: a deadline must"),
    ("cam.onnx:period=20ms:streams=0", "application cam: streams=0: give at least 1"),
    ("cam.onnx:period=20ms:streams=two", "streams='two' is not an integer"),
    ("cam.onnx:period=20ms:name=a/b", "'/' is kept for stream names"),
])
def test_bad_stream_settings(text, match):
    with pytest.raises(InputError, match=match) as e:
        parse_app_spec(text)
    assert "\n" not in str(e.value)


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
