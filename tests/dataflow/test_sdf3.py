"""SDF3 XML export and import."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings, strategies as st

from hetflow.dataflow.analysis import throughput_mcr
from hetflow.dataflow.graphs import Actor, Channel, CsdfGraph
from hetflow.dataflow.sdf3 import from_sdf3_xml, read_sdf3, to_sdf3_xml, write_sdf3
from hetflow.errors import InputError

from strategies import csdf_graphs


def mapped_csdf() -> CsdfGraph:
    return CsdfGraph(
        "app",
        [Actor("cam", [0.25e-3], processor="cpu0"),
         Actor("conv", [3e-3, 1e-3], processor="gpu", concurrency=2),
         Actor("fc", [0.5e-3, 0.75e-3, 2e-3], processor="cpu0", concurrency=None)],
        [Channel("frames", "cam", "conv", [1], [1, 0], capacity=4),
         Channel("feat", "conv", "fc", [3, 0], [1, 1, 1], transfer_time=0.125e-3),
         Channel("ack", "fc", "cam", [0, 0, 2], [1], initial_tokens=2)],
        {"cpu0": ["cam", "cam", "fc", "fc", "fc"]})


def test_round_trip_keeps_the_graph():
    g = mapped_csdf()
    assert from_sdf3_xml(to_sdf3_xml(g)).to_dict() == g.to_dict()


def test_export_uses_the_sdf3_schema():
    root = ET.fromstring(to_sdf3_xml(mapped_csdf()))
    assert root.tag == "sdf3" and root.get("type") == "csdf" and root.get("version") == "1.0"
    app = root.find("applicationGraph")
    conv = app.find("csdf/actor[@name='conv']")
    rates = {p.get("name"): (p.get("type"), p.get("rate")) for p in conv.findall("port")}
    assert rates["in_frames"] == ("in", "1,0") and rates["out_feat"] == ("out", "3,0")
    channel = app.find("csdf/channel[@name='ack']")
    assert (channel.get("srcActor"), channel.get("dstActor"), channel.get("initialTokens")) == \
        ("fc", "cam", "2")
    times = app.find("csdfProperties/actorProperties[@actor='conv']/processor/executionTime")
    assert times.get("time") == "3000,1000"  # microseconds
    assert app.find("csdfProperties/channelProperties[@channel='frames']/bufferSize"
                    ).get("sz") == "4"
    # concurrency 2 becomes a 2-token self-loop that SDF3 and Kiter understand
    loop = app.find("csdf/channel[@name='conv__concurrency']")
    assert loop.get("srcActor") == loop.get("dstActor") == "conv"
    assert loop.get("initialTokens") == "2"


def test_sdf_graphs_export_as_sdf():
    g = CsdfGraph("s", [Actor("a", [1.0]), Actor("b", [2.0])], [Channel("c", "a", "b", [2], [3])])
    text = to_sdf3_xml(g, time_unit=1.0)
    assert '<sdf3 type="sdf"' in text and "<sdfProperties>" in text
    assert re.search(r'<executionTime time="2"', text)
    assert from_sdf3_xml(text).to_dict() == g.to_dict()


def test_times_are_rounded_to_the_time_unit():
    g = CsdfGraph("r", [Actor("a", [1.4e-6, 0.4e-6, 2.6e-6])], [])
    assert from_sdf3_xml(to_sdf3_xml(g)).actors[0].exec_times == [1e-6, 0.0, 3e-6]
    back = from_sdf3_xml(to_sdf3_xml(g, time_unit=1e-9))
    assert back.actors[0].exec_times == pytest.approx([1.4e-6, 0.4e-6, 2.6e-6], rel=1e-12)


# A CSDF graph written as SDF3 and Kiter write theirs: no hetflow settings, several processor
# types (the last one marked default wins, as in SDF3), a bufferSize, port rates shorter than the
# actor's phase count (repeated cyclically, as Kiter reads them), SDF3's `n*x` repetition.
FOREIGN = """<?xml version="1.0"?>
<sdf3 type="csdf" version="1.0">
  <applicationGraph name="foreign">
    <csdf name="foreign" type="F">
      <actor name="x" type="X">
        <port name="o" type="out" rate="2,1"/>
        <port name="i" type="in" rate="1"/>
      </actor>
      <actor name="y" type="Y">
        <port name="i" type="in" rate="3*1"/>
        <port name="o" type="out" rate="1,1,1"/>
      </actor>
      <channel name="xy" srcActor="x" srcPort="o" dstActor="y" dstPort="i"/>
      <channel name="yx" srcActor="y" srcPort="o" dstActor="x" dstPort="i" initialTokens="4"/>
    </csdf>
    <csdfProperties>
      <actorProperties actor="x">
        <processor type="arm" default="true"><executionTime time="7,9"/></processor>
        <processor type="dsp" default="true"><executionTime time="3,4"/></processor>
      </actorProperties>
      <actorProperties actor="y">
        <processor type="arm"><executionTime time="2,2,2"/></processor>
      </actorProperties>
      <channelProperties channel="xy"><bufferSize sz="5" src="5" dst="5" mem="0"/></channelProperties>
    </csdfProperties>
  </applicationGraph>
</sdf3>"""


def test_import_of_a_foreign_file():
    g = from_sdf3_xml(FOREIGN, time_unit=1.0)
    x, y = g.actors
    assert (x.exec_times, x.concurrency, x.processor) == ([3.0, 4.0], None, None)
    assert y.exec_times == [2.0, 2.0, 2.0]
    xy, yx = g.channels
    assert (xy.production, xy.consumption, xy.capacity) == ([2, 1], [1, 1, 1], 5)
    assert (yx.production, yx.consumption, yx.initial_tokens) == ([1, 1, 1], [1, 1], 4)


def test_settings_are_ignored_by_the_standard_part():
    # without hetflow's settings (as another tool reads the file) concurrency 1 is kept by the
    # exported self-loops, so throughput is unchanged when nothing else needs the settings
    g = CsdfGraph("p", [Actor("a", [1e-3, 2e-3]), Actor("b", [3e-3], concurrency=None)],
                  [Channel("c", "a", "b", [1, 1], [2]), Channel("d", "b", "a", [2], [1, 1], 4)])
    text = re.sub(r"<settings.*</settings>", "", to_sdf3_xml(g), flags=re.S)
    foreign = from_sdf3_xml(text)
    assert all(a.concurrency is None for a in foreign.actors)
    assert len(foreign.channels) == 3  # a's concurrency self-loop is an ordinary channel now
    assert throughput_mcr(foreign).period == pytest.approx(throughput_mcr(g).period)


@pytest.mark.parametrize("text,message", [
    ("<sdf3", "not well-formed"),
    ("<graph/>", "root element is <graph>"),
    ("<sdf3 type='sdf' version='1.0'><applicationGraph name='g'/></sdf3>", "no <sdf> or <csdf>"),
    (FOREIGN.replace('dstPort="i"/>\n      <channel name="yx"', 'dstPort="zz"/>\n      <channel '
                     'name="yx"'), "unknown port 'zz' of actor 'y'"),
    (FOREIGN.replace('time="3,4"', 'time="3,x"'), "execution time of actor 'x'"),
    (FOREIGN.replace('rate="2,1"', 'rate="2,a"'), "rate of port 'o' of actor 'x'"),
])
def test_bad_files_raise_input_errors(text, message):
    with pytest.raises(InputError, match=message):
        from_sdf3_xml(text)


def test_write_is_atomic_and_reads_back(tmp_path):
    g = mapped_csdf()
    path = tmp_path / "app.xml"
    write_sdf3(g, path)
    assert read_sdf3(path).to_dict() == g.to_dict()
    assert [p.name for p in tmp_path.iterdir()] == ["app.xml"]
    bad = mapped_csdf()
    bad.channels[0].production = [1, 2]  # wrong length: refused before anything is written
    with pytest.raises(InputError):
        write_sdf3(bad, tmp_path / "bad.xml")
    assert [p.name for p in tmp_path.iterdir()] == ["app.xml"]


def test_read_names_the_file(tmp_path):
    path = tmp_path / "broken.xml"
    path.write_text("<sdf3")
    with pytest.raises(InputError, match="broken.xml"):
        read_sdf3(path)


@settings(max_examples=60, deadline=None)
@given(csdf_graphs(live=False, float_times=True) | csdf_graphs(live=False))
def test_random_graphs_round_trip(g):
    back = from_sdf3_xml(to_sdf3_xml(g))
    assert back.to_dict() == g.to_dict()  # the strategy's times are whole microseconds


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=5),
       st.sampled_from([1e-6, 1e-3, 0.5]))
def test_times_come_back_within_half_a_unit(times, unit):
    g = CsdfGraph("t", [Actor("a", times)], [])
    back = from_sdf3_xml(to_sdf3_xml(g, time_unit=unit)).actors[0].exec_times
    assert all(abs(b - t) <= unit / 2 * (1 + 1e-9) + 1e-12 for b, t in zip(back, times))
