"""Analysis of timed SDF/CSDF graphs with mapping constraints (see hetflow/dataflow/graphs.py).

repetition_vector, check_liveness, throughput by maximum cycle ratio (throughput_mcr) and by
state-space simulation (throughput_simulation), latency, and minimal buffer capacities.
"""
from hetflow.dataflow.analysis.buffers import min_buffer_capacities
from hetflow.dataflow.analysis.latency import LatencyResult, latency, saturated_latency
from hetflow.dataflow.analysis.liveness import check_liveness, sequential_schedule
from hetflow.dataflow.analysis.repetition import repetition_vector
from hetflow.dataflow.analysis.simulation import StateSpaceLimitError, throughput_simulation
from hetflow.dataflow.analysis.throughput import ThroughputResult, throughput_mcr

__all__ = ["LatencyResult", "StateSpaceLimitError", "ThroughputResult", "check_liveness",
           "latency", "min_buffer_capacities", "repetition_vector", "saturated_latency",
           "sequential_schedule", "throughput_mcr", "throughput_simulation"]
