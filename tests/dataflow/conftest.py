"""Fixtures of tests/dataflow: defined in dataflow_helpers (importable by a unique name)."""
from dataflow_helpers import *  # noqa: F401,F403
