"""Runtime: execute a plan's CSDF application as a pipelined engine; measure the baselines."""
from .api import load_plan_model, run_plan
from .ray_engine import run_plan_ray  # imports Ray only when called
from .report import RunReport

__all__ = ["run_plan", "run_plan_ray", "load_plan_model", "RunReport"]
