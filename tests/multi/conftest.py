"""Fixtures of tests/multi: defined in multi_helpers (importable by a unique name)."""
from multi_helpers import *  # noqa: F401,F403
