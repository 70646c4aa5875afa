"""hetflow: pipelined CNN inference on heterogeneous machines.

The public API mirrors the command line: load a model, convert it to dataflow, analyse it,
profile it, map it, run it. Heavy parts are imported lazily so `import hetflow` stays light.
"""
from __future__ import annotations

__version__ = "0.1.0"

from hetflow.errors import HetflowError, InputError  # noqa: E402
from hetflow.model import load_model, resolve_model  # noqa: E402
from hetflow.dataflow.sdf import cnn_to_sdf  # noqa: E402
from hetflow.dataflow.csdf import cnn_to_csdf  # noqa: E402

__all__ = ["HetflowError", "InputError", "load_model", "resolve_model", "cnn_to_sdf",
           "cnn_to_csdf", "__version__"]
