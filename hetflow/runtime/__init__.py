"""Runtime: execute a plan's CSDF application as a pipelined engine; measure the baselines."""
from .api import load_plan_model, run_plan  # run_plan(..., engine="ray") imports Ray when called
from .report import RunReport

__all__ = ["run_plan", "load_plan_model", "RunReport"]
