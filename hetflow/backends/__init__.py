"""Backends run a sub-network on a processing element: ONNX Runtime on CPU groups, PyTorch on
CUDA GPUs. `get_backend('cpu')` / `backend_for(element)` pick one; `register_backend` adds one."""
from hetflow.backends.affinity import (caller_cores_of, control_cores, pin_current_thread,
                                       pinned)
from hetflow.backends.base import Backend, Runner
from hetflow.backends.registry import (DEFAULT_FOR_KIND, backend_for, get_backend,
                                       register_backend, registered_backends)

__all__ = ["Backend", "DEFAULT_FOR_KIND", "Runner", "backend_for", "get_backend",
           "caller_cores_of", "control_cores", "pin_current_thread", "pinned",
           "register_backend", "registered_backends"]
