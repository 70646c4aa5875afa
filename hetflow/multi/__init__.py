"""Several CNNs at once (Kang et al. 2020, Section VI): application specs with periods and
priorities, schedule-based schedulability (demand bound functions, Eq. 10/11), a multi-objective
search of a joint mapping, the multi-plan file, and a runtime that shares elements by priority."""
from hetflow.multi.multiplan import AppEntry, MultiPlan, make_multiplan
from hetflow.multi.spec import AppSpec, parse_app_spec, parse_app_specs, parse_period

__all__ = ["AppEntry", "AppSpec", "MultiPlan", "make_multiplan", "parse_app_spec",
           "parse_app_specs", "parse_period"]
