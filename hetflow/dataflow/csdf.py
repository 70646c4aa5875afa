"""Algorithm 2 of Minakova et al.: CNN + mapping -> CSDF application, one actor per element.

An actor fires its phases in a fixed cyclic order; each phase runs a connected sub-network of the
layers mapped on that element, consuming all its inputs at the start and producing all its outputs
at the end. Phases are cut so that no phase waits, directly or through other actors, on data it
produces itself: that is what keeps the application live.

Where we differ from the published pseudo-code, and why:
- Layers are visited in topological order rather than by a BFS per element. The BFS can put a
  layer into a phase before a same-element predecessor that lands in a later phase, and it keeps
  adding queued layers after a phase has emitted data to another element; both give cycles (a
  deadlock) for some branchy mappings. Visiting in topological order and checking reachability
  in the phase graph makes every mapping of every DAG live (tested on random DAGs).
- One channel per (tensor, destination actor), consumed by the earliest phase that needs it;
  later phases of that actor read the tensor from the actor's local memory. The paper has one
  channel per CNN edge, which would send the same tensor twice.
- `policy="paper"` cuts a phase right after a layer that feeds another element (the paper's
  rule: lets the consumer start early, good for latency); `policy="maximal"` keeps adding layers
  while that stays live (fewer, larger phases: less per-call overhead in the runtime).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from hetflow.errors import InputError
from hetflow.model.graph import CnnGraph

from hetflow.dataflow.graphs import Actor, Channel, CsdfGraph

PhasePolicy = Literal["paper", "maximal"]


@dataclass
class Phase:
    actor: str
    index: int
    layers: list[str]
    inputs: list[str] = field(default_factory=list)  # tensors it reads that it does not produce
    outputs: list[str] = field(default_factory=list)  # tensors it produces that others read

    @property
    def key(self) -> str:
        return f"{self.actor}#{self.index}"

    def to_dict(self) -> dict[str, Any]:
        return {"actor": self.actor, "index": self.index, "layers": self.layers,
                "inputs": self.inputs, "outputs": self.outputs}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Phase":
        return Phase(d["actor"], d["index"], list(d["layers"]), list(d["inputs"]),
                     list(d["outputs"]))


@dataclass
class AppChannel:
    """A FIFO between two actors carrying one tensor per frame."""

    name: str
    tensor: str
    src: str
    src_phase: int
    dst: str
    dst_phase: int
    tokens: int  # elements per frame (the CSDF rate)
    nbytes: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "AppChannel":
        return AppChannel(**d)


@dataclass
class CsdfApp:
    """The CSDF application of a mapped CNN: what the runtime executes."""

    model_name: str
    model_hash: str
    assignment: dict[str, str]  # layer -> actor
    phases: dict[str, list[Phase]]  # actor -> its phases in firing order
    channels: list[AppChannel]
    model_inputs: dict[str, list[str]]  # model input tensor -> actors that read it
    model_outputs: dict[str, str]  # model output tensor -> actor that produces it

    @property
    def actors(self) -> list[str]:
        return list(self.phases)

    def phase_of(self) -> dict[str, tuple[str, int]]:
        return {l: (a, p.index) for a, ps in self.phases.items() for p in ps for l in p.layers}

    def to_graph(self, phase_time: Callable[[Phase], float],
                 transfer_time: Callable[[AppChannel], float] | None = None,
                 capacity_frames: int | dict[str, int] | None = None,
                 concurrency: dict[str, int] | None = None,
                 batch: dict[str, int] | None = None) -> CsdfGraph:
        """The timed CSDF graph for analysis: one token = one element of a tensor.

        `capacity_frames` bounds every channel (or the named ones) to that many frames.
        `concurrency[actor] = k` models a stage replicated on k elements taking frames in turn.
        `batch[actor] = b`: each firing of the actor takes b frames (its rates are b frames of
        tokens; its neighbours' stay one, so they fire b times per firing of it).
        """
        batch = batch or {}
        # a replicated stage takes whole frames in turn: all phases of a frame on one replica
        actors = [Actor(a, [phase_time(p) for p in ps], processor=a,
                        concurrency=(concurrency or {}).get(a, 1), attrs={"replicate": "cycle"})
                  for a, ps in self.phases.items()]
        channels = []
        for c in self.channels:
            prod = [0] * len(self.phases[c.src])
            cons = [0] * len(self.phases[c.dst])
            prod[c.src_phase] = c.tokens * batch.get(c.src, 1)
            cons[c.dst_phase] = c.tokens * batch.get(c.dst, 1)
            cap = capacity_frames.get(c.name) if isinstance(capacity_frames, dict) else capacity_frames
            channels.append(Channel(c.name, c.src, c.dst, prod, cons, 0,
                                    None if cap is None else cap * c.tokens,
                                    transfer_time(c) if transfer_time else 0.0,
                                    attrs={"tensor": c.tensor}))
        return CsdfGraph(f"{self.model_name}_csdf", actors, channels)

    def to_dict(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "model_hash": self.model_hash,
                "assignment": self.assignment,
                "phases": {a: [p.to_dict() for p in ps] for a, ps in self.phases.items()},
                "channels": [c.to_dict() for c in self.channels],
                "model_inputs": self.model_inputs, "model_outputs": self.model_outputs}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "CsdfApp":
        return CsdfApp(d["model_name"], d["model_hash"], dict(d["assignment"]),
                       {a: [Phase.from_dict(p) for p in ps] for a, ps in d["phases"].items()},
                       [AppChannel.from_dict(c) for c in d["channels"]],
                       {k: list(v) for k, v in d["model_inputs"].items()},
                       dict(d["model_outputs"]))


def cnn_to_csdf(graph: CnnGraph, assignment: dict[str, str],
                policy: PhasePolicy = "paper") -> CsdfApp:
    """Algorithm 2 (with the liveness fix described in the module docstring)."""
    missing = [l.name for l in graph.layers if l.name not in assignment]
    if missing:
        raise InputError(f"mapping leaves {len(missing)} layer(s) unmapped, e.g. {missing[0]!r}")
    if policy not in ("paper", "maximal"):
        raise InputError(f"unknown phase policy {policy!r} (use 'paper' or 'maximal')")
    preds, succs = graph.preds, graph.succs
    phase_of: dict[str, int] = {}  # layer -> global phase id
    phase_actor: list[str] = []
    phase_layers: list[list[str]] = []
    phase_succ: list[set[int]] = []  # phase dependency graph (data + sequence edges)
    open_phase: dict[str, int] = {}  # actor -> its current phase id
    closed: set[int] = set()  # phases the paper's rule has cut

    def reaches(src: int, targets: set[int]) -> bool:
        stack, seen = [src], {src}
        while stack:
            for n in phase_succ[stack.pop()]:
                if n in targets:
                    return True
                if n not in seen:
                    seen.add(n)
                    stack.append(n)
        return False

    for layer in graph.layers:
        name = layer.name
        actor = assignment[name]
        pred_phases = {phase_of[p] for p in preds[name]}
        cur = open_phase.get(actor)
        join = cur is not None and cur not in closed
        if join and policy == "paper" and cur not in pred_phases:
            join = False  # phases are connected sub-networks
        if join:
            others = pred_phases - {cur}
            join = not (others and reaches(cur, others))
        if not join:
            new = len(phase_actor)
            phase_actor.append(actor)
            phase_layers.append([])
            phase_succ.append(set())
            if cur is not None:
                phase_succ[cur].add(new)  # sequence edge: phases of one actor fire in order
            open_phase[actor] = cur = new
        phase_of[name] = cur
        phase_layers[cur].append(name)
        for q in pred_phases - {cur}:
            phase_succ[q].add(cur)
        if policy == "paper" and any(assignment[s] != actor for s in succs[name]):
            closed.add(cur)

    # number phases per actor in creation order (which is their firing order)
    index: dict[int, int] = {}
    phases: dict[str, list[Phase]] = {}
    for pid, actor in enumerate(phase_actor):
        ps = phases.setdefault(actor, [])
        index[pid] = len(ps)
        ps.append(Phase(actor, len(ps), phase_layers[pid]))
    by_pid = {pid: phases[a][index[pid]] for pid, a in enumerate(phase_actor)}

    model_outputs = {t: assignment[graph.producer[t]] for t in graph.outputs}
    model_inputs: dict[str, list[str]] = {}
    channels: list[AppChannel] = []
    for pid, ph in by_pid.items():
        inside = set(ph.layers)
        for lname in ph.layers:
            layer = graph.layer(lname)
            for t in layer.inputs:
                src = graph.producer.get(t)
                if (src is None or src not in inside) and t not in ph.inputs:
                    ph.inputs.append(t)
                    if src is None:
                        readers = model_inputs.setdefault(t, [])
                        if ph.actor not in readers:
                            readers.append(ph.actor)
            for t in layer.outputs:
                outside = [c for c in graph.consumers.get(t, []) if c not in inside]
                if (outside or t in model_outputs) and t not in ph.outputs:
                    ph.outputs.append(t)
    # one channel per (tensor, destination actor), consumed by the earliest phase needing it
    for t, src in graph.producer.items():
        src_actor = assignment[src]
        first: dict[str, int] = {}
        for c in graph.consumers.get(t, []):
            a = assignment[c]
            if a != src_actor:
                first[a] = min(first.get(a, 1 << 30), index[phase_of[c]])
        info = graph.tensors[t]
        for dst, dp in first.items():
            channels.append(AppChannel(f"{t}:{src_actor}->{dst}", t, src_actor,
                                       index[phase_of[src]], dst, dp, info.elements, info.nbytes))
    return CsdfApp(graph.name, graph.model_hash, dict(assignment), phases, channels,
                   model_inputs, model_outputs)
