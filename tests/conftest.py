"""Shared test settings. In CI (CI=true) property tests draw the same examples every run, so a
red build always reproduces; locally they explore new examples each time."""
import os
import signal

from hypothesis import settings
import pytest
from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.plan.mapping import Mapping, group_members
from hetflow.plan.plan import Plan
from hetflow.platform.spec import ProcessingElement

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# a run started in the background by a script (`pytest &`) inherits SIGINT ignored, and the
# Ctrl-C tests (an interrupt of this process, SIGINT sent to a child it starts) then wait for
# a signal that never comes: give it Python's handler, which children get again
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

def element(name: str) -> ProcessingElement:
    cores = sorted(os.sched_getaffinity(0))
    return ProcessingElement(name, "cpu", (cores[hash(name) % len(cores)],))


def make_plan(graph, assignment: dict[str, str], capacity: int = 2, policy: str = "paper",
              dispatch: dict[str, list[int]] | None = None) -> Plan:
    app = cnn_to_csdf(graph, assignment, policy)
    elements = {e: element(e) for a in app.phases for e in group_members(a)}
    return Plan(graph.name, graph.model_hash, "", "test", Mapping(assignment, policy, dispatch=dispatch or {}), app,
                elements, capacity, {"throughput": 0.0}, "test")


@pytest.fixture
def plan_for():
    return make_plan
