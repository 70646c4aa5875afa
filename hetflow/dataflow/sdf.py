"""Algorithm 1 of Minakova et al.: CNN -> SDF, one actor per layer, one FIFO channel per edge.

At batch 1 every layer fires once per frame, so the graph is homogeneous at layer level; the
rates are the element counts of the tensors (the paper's |e.data|).
"""
from __future__ import annotations

from typing import Callable

from hetflow.model.graph import CnnGraph

from hetflow.dataflow.graphs import Actor, Channel, CsdfGraph


def cnn_to_sdf(graph: CnnGraph, layer_time: Callable[[str], float] | None = None) -> CsdfGraph:
    actors = [Actor(l.name, [layer_time(l.name) if layer_time else 0.0],
                    attrs={"op_type": l.op_type}) for l in graph.layers]
    channels = []
    for e in graph.edges:
        n = graph.tensors[e.tensor].elements
        channels.append(Channel(f"{e.src}->{e.dst}", e.src, e.dst, [n], [n],
                                attrs={"tensor": e.tensor}))
    return CsdfGraph(f"{graph.name}_sdf", actors, channels)
