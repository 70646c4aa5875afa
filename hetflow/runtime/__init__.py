"""Runtime: execute a plan's CSDF application as a pipelined engine; measure the baselines."""
from hetflow.runtime.api import load_plan_model, run_plan  # run_plan(..., engine="ray") imports Ray when called
from hetflow.runtime.report import RunReport

__all__ = ["run_plan", "load_plan_model", "RunReport"]
