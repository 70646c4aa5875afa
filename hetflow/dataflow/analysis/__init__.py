"""Analysis of timed SDF/CSDF graphs with mapping constraints (see hetflow/dataflow/graphs.py).

repetition_vector, check_liveness, throughput by maximum cycle ratio (throughput_mcr) and by
state-space simulation (throughput_simulation), latency, and minimal buffer capacities.
"""
from .buffers import min_buffer_capacities
from .latency import LatencyResult, latency, saturated_latency
from .liveness import check_liveness, sequential_schedule
from .repetition import repetition_vector
from .simulation import StateSpaceLimitError, throughput_simulation
from .throughput import ThroughputResult, throughput_mcr

__all__ = ["LatencyResult", "StateSpaceLimitError", "ThroughputResult", "check_liveness",
           "latency", "min_buffer_capacities", "repetition_vector", "saturated_latency",
           "sequential_schedule", "throughput_mcr", "throughput_simulation"]
