"""Shared test settings. In CI (CI=true) property tests draw the same examples every run, so a
red build always reproduces; locally they explore new examples each time."""
import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
