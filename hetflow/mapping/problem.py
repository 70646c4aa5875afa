"""The mapping problem and the evaluation of one mapping (predicted throughput, latency, ...).

`Problem` (immutable: calibration.py's steps return new ones) holds everything a strategy needs
as plain arrays: layer times per element (from a
profile), the transfer-time model, element powers, which elements exclude each other (a core can
be in only one element of a configuration). `evaluate` builds the CSDF app of a mapping
(Algorithm 2), times it and analyses it; strategies call it as their fitness.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property, partial
import math
from typing import Callable

import numpy as np

from hetflow.dataflow.csdf import CsdfApp, cnn_to_csdf
from hetflow.dataflow.graphs import CsdfGraph
from hetflow.errors import InputError
from hetflow.mapping.energy import ElementPower, frame_energy, modelled_power
from hetflow.model.graph import CnnGraph
from hetflow.platform.spec import ProcessingElement

from hetflow.plan.mapping import Mapping, group_members
from hetflow.backends.staging import row_chunks
from hetflow.dataflow.analysis import (
    StateSpaceLimitError,
    check_liveness,
    latency,
    saturated_latency as analysed,
    throughput_mcr,
)
from hetflow.dataflow.analysis.latency import isolated_latency
from hetflow.dataflow.analysis.orders import unfolded
from hetflow.model.subnet import subnet_key
from hetflow.plan.orders import channel_windows, extra_windows, firing_orders
from hetflow.profile.lanes import best_count

TransferFn = Callable[[int, str, str], float]


def _between(curve: dict[int, float], lanes: int) -> float:
    """A per-lane-count figure at `lanes`: linear between measured counts; below or above
    them, the nearest measured."""
    if lanes in curve:
        return curve[lanes]
    ks = sorted(curve)
    if lanes <= ks[0]:
        return curve[ks[0]]
    if lanes >= ks[-1]:
        return curve[ks[-1]]
    lo = max(k for k in ks if k < lanes)
    hi = min(k for k in ks if k > lanes)
    return curve[lo] + (curve[hi] - curve[lo]) * (lanes - lo) / (hi - lo)


def _on_curve(curve: dict[int, float], lanes: int) -> float:
    """A slowdown curve at `lanes`: linear between measured counts; past the largest, no more
    throughput than there."""
    top = max(curve)
    return curve[top] * lanes / top if lanes > top else _between(curve, lanes)


@dataclass(frozen=True)
class Problem:
    graph: CnnGraph
    elements: list[ProcessingElement]
    layer_times: np.ndarray  # (n_layers, n_elements) seconds; inf = cannot run there
    transfer: TransferFn  # (nbytes, src element, dst element) -> seconds
    call_overhead: float = 30e-6  # runtime cost of one phase firing (dispatch, queue hand-off)
    capacity_frames: int = 2  # FIFO capacity in frames (double buffering)
    idle_power_fraction: float = 0.0  # energy model: idle elements draw this share of power_w
    # element -> its measured idle and busy power (mapping/energy.py, from the profile); an
    # element without is modelled from its power_w, labelled with why (`power_unmeasured`)
    power: dict[str, ElementPower] = field(default_factory=dict)
    power_unmeasured: dict[str, str] = field(default_factory=dict)
    # element sets a mapping may use together (each one configuration of the platform);
    # empty = every element alone, and all pairwise non-conflicting elements together
    configurations: list[list[str]] = field(default_factory=list)
    # measured times of whole sub-networks {(element, subnet_key(layers)): s}; a phase whose
    # sub-network was measured uses that time instead of the sum of its layers (fusion, cache
    # effects and per-call overhead make the two differ)
    subnet_times: dict[tuple[str, str], float] = field(default_factory=dict)
    # per element cost of one backend call, which per-layer profiles leave out: a phase run from
    # layer times costs the sum of its layers plus this once
    element_overhead: dict[str, float] = field(default_factory=dict)
    # element -> the slowdown its times were scaled by (calibration.contended); `alone` undoes it
    contention: dict[str, float] = field(default_factory=dict)
    # {(element, subnet_key(layers)): s} of one plan's stages timed with all its elements busy
    # at once (hetflow.profile.under_load): used as measured, without the contention factor,
    # and only while that plan is evaluated (another plan loads the machine differently)
    loaded_times: dict[tuple[str, str], float] = field(default_factory=dict)
    # GPU lanes (see mapping.py): element -> {k: firing time at k lanes / firing time at 1 lane},
    # measured on the whole model with the other elements idle, and with single-thread CPU
    # copies busy on the other cores (that curve also carries the GPU's slowdown under load)
    lane_slowdown: dict[str, dict[int, float]] = field(default_factory=dict)
    lane_slowdown_busy: dict[str, dict[int, float]] = field(default_factory=dict)
    lane_limit: dict[str, int] = field(default_factory=dict)  # most lanes device memory holds
    # GPU element -> scale of its busy curve: its firing time beside busy copies as a longer,
    # later run measured it (the bench's parallel baseline) over what the curve says
    lane_busy_scale: dict[str, float] = field(default_factory=dict)
    # GPU element -> {k: slowdown} of the whole model alone at k lanes as a longer, later run
    # measured it (the bench's peak-single baseline): it takes the lane table's place there
    # (calibration.alone_lane_slowdown); a stage's busy / alone ratio stays the table's own
    lane_alone_runs: dict[str, dict[int, float]] = field(default_factory=dict)
    # {(element, subnet_key(layers)): {k: firing at k lanes / at one}} of a stage timed alone at
    # its own lane counts: a stage's lanes share the device by its work, not by its one-lane
    # time (densenet121's first 173 of 309 layers on 8 lanes ran at about the whole model's rate,
    # where the whole model's curve times their summed one-lane time promised 1.6x it). Beside busy
    # copies the stage is slowed as the whole model is (its busy / alone ratio at k)
    stage_slowdown: dict[tuple[str, str], dict[int, float]] = field(default_factory=dict)
    # {k: CPU time a GPU's driving thread spends per firing (copies, launch, wait) with k
    # lanes}: its lanes share its driving cores, so k lanes fire no faster than
    # k * (this + call_overhead) / cores (the part that does not depend on the firing's borders;
    # see host_seconds). Per lane count: a thread among 16 or 24 on one core spends more per
    # firing than among 8 (squeezenet1_0 on the H100: the 16-lane figure bounded an 8-lane
    # plan at 4,900 frames/s, which ran 6,000)
    host_time: dict[str, dict[int, float]] = field(default_factory=dict)
    host_time_busy: dict[str, dict[int, float]] = field(default_factory=dict)  # beside copies
    # seconds per border byte the driving thread spends copying a firing's inputs into pinned
    # memory (data another core wrote) and its outputs out of it: a stage fed a large activation
    # is host-bound long before the device is (a 11 MB input: 1.4 ms of copying per firing on
    # the H100 host)
    host_per_byte: dict[str, float] = field(default_factory=dict)
    # wall seconds per byte of a full batch staged by all of an element's threads together
    host_staged_per_byte: dict[str, float] = field(default_factory=dict)
    # CPU element -> (a, b): a firing pays a + b * its border bytes beyond its layers' profiled
    # time (inputs another core wrote, fresh output arrays; profile.measure.border_cost). Not
    # for a whole-model firing, whose time was taken as the runtime calls it, borders included,
    # nor for a stage timed in the engine under load
    border_cost: dict[str, tuple[float, float]] = field(default_factory=dict)
    # batches (mapping.py: a firing on b frames): element -> {k: {b: firing time of b frames at
    # k lanes / firing time of one frame at k lanes}}, from the profile's batch table measured
    # on the whole model alone, and beside busy CPU copies (from_profile.batch_curves)
    batch_slowdown: dict[str, dict[int, dict[int, float]]] = field(default_factory=dict)
    batch_slowdown_busy: dict[str, dict[int, dict[int, float]]] = field(default_factory=dict)

    # ---- batches ----
    def batch_sizes(self, element: str) -> list[int]:
        """The batches measured on `element` at some lane count ([1] without a batch table)."""
        table = self.batch_slowdown.get(element)
        return sorted({b for per in table.values() for b in per}) if table else [1]

    def check_batch(self, element: str, batch: int) -> None:
        """InputError naming the element unless its profile measured `batch` (1 always is)."""
        if batch == 1:
            return
        if element not in self.batch_slowdown:
            raise InputError(f"element {element!r}: batch {batch} asked for, but its profile "
                             "has no batch table (profile it again with batches)")
        if batch not in self.batch_sizes(element):
            raise InputError(f"element {element!r}: batch {batch} was not measured by its "
                             f"profile (measured: {', '.join(map(str, self.batch_sizes(element)))})")

    def batch_factor(self, element: str, batch: int, lanes: int, busy: bool) -> float:
        """Firing time of `batch` frames at `lanes` lanes over that of one frame at as many
        lanes: linear in b between measured batches (refused outside them), and between the
        lane counts measured at them; past the most lanes measured at that batch, no more frames
        a second than there (a device busy with batches gains nothing from more lanes)."""
        if batch == 1:
            return 1.0
        table = (self.batch_slowdown_busy if busy else {}).get(element) or \
            self.batch_slowdown.get(element)
        per_k = {k: _between(per, batch) for k, per in (table or {}).items()
                 if per and min(per) <= batch <= max(per)}
        if not per_k:
            raise InputError(f"element {element!r}: batch {batch} is outside the batches its "
                             f"profile measured ({', '.join(map(str, self.batch_sizes(element)))})")
        top = max(per_k)
        if lanes > top:  # t(b, k) = t(b, top) k / top: the rate stays that of `top` lanes
            return (per_k[top] * self.slowdown(element, top, busy) * lanes
                    / (top * self.slowdown(element, lanes, busy)))
        return _between(per_k, lanes)

    # ---- lanes ----
    def host_seconds(self, element: str, border_bytes: int, busy: bool,
                     lanes: int = 1, rows: int = 1) -> float | None:
        """CPU time of `element`'s driving thread per firing of `rows` frames of a phase whose
        inputs and outputs hold `border_bytes`, with `lanes` lanes on it: the fixed part
        measured at that lane count (linear between measured counts, the nearest beyond them)
        plus its share of the host copies of its borders (`staging_seconds`)."""
        curve = (self.host_time_busy if busy else {}).get(element) or \
            self.host_time.get(element)
        if not curve:
            return None
        return _between(curve, lanes) + self.staging_seconds(element, border_bytes, rows)

    def staging_seconds(self, element: str, border_bytes: int, rows: int = 1) -> float:
        """Wall time of the host copies of a firing's borders (inputs staged into pinned
        memory, outputs copied out of it): a batch's rows are split between the driving
        thread and the element's other cores (`backends.staging`; the outputs, small
        beside a frame, are split with them here)."""
        stagers = len(row_chunks(rows, len(self.element(element).cores)))
        split = self.host_per_byte.get(element, 0.0) * border_bytes / stagers
        # threads copying at once share the memory's bandwidth: never faster than all of
        # them were seen to stage a full batch together
        return max(split, self.host_staged_per_byte.get(element, 0.0) * border_bytes)

    def relative_rate(self, element: str, batch: int, lanes: int) -> float | None:
        """`element`'s frames/s flat out at (`batch`, `lanes`) alone, over its rate at one
        frame on one lane (None at a batch its profile never measured)."""
        try:
            return lanes * batch / (self.slowdown(element, lanes, False)
                                    * self.batch_factor(element, batch, lanes, False))
        except InputError:
            return None

    def lane_counts(self, element: str) -> list[int]:
        """The lane counts measured on `element` ([1] for an element without lanes)."""
        return sorted(self.lane_slowdown.get(element, {1: 1.0}))

    def slowdown(self, element: str, lanes: int, busy: bool, stage: str | None = None) -> float:
        """Firing time at `lanes` lanes over the firing time at one, from the measured curve:
        linear between measured counts; past the largest, no more throughput than there.
        `stage`: the subnet key of the layers fired, whose own curve is used where measured."""
        own = self.stage_slowdown.get((element, stage)) if stage is not None else None
        scale = self.lane_busy_scale.get(element, 1.0) if busy else 1.0
        if own and lanes in own:
            factor = 1.0
            if busy and element in self.lane_slowdown_busy:  # the load's share, the model's
                factor = (_on_curve(self.lane_slowdown_busy[element], lanes)
                          / _on_curve(self.lane_slowdown.get(element, {1: 1.0}), lanes))
            return own[lanes] * factor * scale
        busy_curve = (self.lane_slowdown_busy if busy else {}).get(element)
        if busy_curve:
            return _on_curve(busy_curve, lanes) * scale
        curve = self.lane_slowdown.get(element)
        if not curve:
            return 1.0
        runs = self.lane_alone_runs.get(element)
        return _on_curve({**curve, **runs} if runs else curve, lanes)

    def stage_key(self, layers: list[str]) -> str | None:
        """The subnet key `slowdown` looks stage curves up by (None while there are none: the
        key sorts the layer names, which a search evaluating thousands of mappings skips)."""
        if not self.stage_slowdown:
            return None

        return subnet_key(layers)

    def best_lanes(self, element: str, busy: bool = True) -> int:
        """The measured lane count with the highest throughput (k / slowdown); the fewest on a
        tie within 1% (fewer frames in flight, shorter latency)."""

        ks = [k for k in self.lane_counts(element)
              if k <= self.lane_limit.get(element, 1 << 30)] or [1]
        return best_count({k: k / self.slowdown(element, k, busy) for k in ks})

    def lanes_in(self, mapping: Mapping, element: str) -> int:
        """Lanes of `element` in `mapping`: as the mapping says, else the best measured count
        (one in rounds of several frames, which are analysed unfolded, one frame at a time)."""
        if element in mapping.lanes:
            return mapping.lanes[element]
        if mapping.round_frames > 1:
            return 1
        return self.best_lanes(element, busy=len(set(mapping.elements)) > 1)

    @cached_property
    def frame_layer_times(self) -> np.ndarray:
        """Layer times as a share of each element's capacity per frame: a GPU at its best lane
        count k runs k frames at once, each firing slowed by its measured factor, so a layer
        costs it t * slowdown(k) / k. Load-balance searches rank designs with these."""
        out = np.array(self.layer_times, float, copy=True)
        for e, col in self.element_index.items():
            if e in self.lane_slowdown:
                k = self.best_lanes(e)
                out[:, col] *= self.slowdown(e, k, busy=True) / k
        return out

    @cached_property
    def element_index(self) -> dict[str, int]:
        return {e.name: i for i, e in enumerate(self.elements)}

    @cached_property
    def layer_index(self) -> dict[str, int]:
        return self.graph.layer_index

    def shares_cores(self, a: ProcessingElement, b: ProcessingElement) -> bool:
        """Whether two elements occupy a common core (a subclass may know more, e.g. nodes)."""
        return bool(set(a.cores) & set(b.cores))

    @cached_property
    def conflicts(self) -> np.ndarray:
        """conflicts[i, j]: elements i and j share a core (cannot both be used)."""
        n = len(self.elements)
        c = np.zeros((n, n), bool)
        for i, a in enumerate(self.elements):
            for j, b in enumerate(self.elements):
                c[i, j] = i != j and self.shares_cores(a, b)
        return c

    @cached_property
    def alone(self) -> "Problem":
        """This problem without the contention scaling, for a mapping on one element: it has
        the machine to itself (on the GPU machine the contention factor made a GPU-only plan
        look 10% slower than measured, and the search preferred a plan that was slower)."""
        if not self.contention:
            return self
        scale = np.array([self.contention.get(e.name, 1.0) for e in self.elements])
        return replace(self, layer_times=self.layer_times / scale, contention={},
                       element_overhead={e: t / self.contention.get(e, 1.0)
                                         for e, t in self.element_overhead.items()})

    def element_power(self, name: str) -> ElementPower | None:
        """`name`'s power figure: measured, else modelled from its power_w; None if neither."""
        if name in self.power:
            return self.power[name]
        return modelled_power(self.element(name), self.idle_power_fraction,
                              self.power_unmeasured.get(name, "no power measured"))

    def element(self, name: str) -> ProcessingElement:
        try:
            return self.elements[self.element_index[name]]
        except KeyError:
            raise InputError(f"mapping names element {name!r}, which is not in the profile "
                             f"(elements: {', '.join(self.element_index)})") from None

    def check_elements_compatible(self, names: list[str]) -> None:
        idx = [self.element_index[n] for n in names]
        for a in range(len(idx)):
            for b in range(a + 1, len(idx)):
                if idx[a] == idx[b] or self.conflicts[idx[a], idx[b]]:
                    raise InputError(f"elements {names[a]!r} and {names[b]!r} share cores; a "
                                     "mapping may use only elements of one configuration")

    def actor_time(self, layers: list[str], actor: str) -> float:
        """Time of running `layers` on (one member of) `actor`."""
        members = group_members(actor)
        el = members[0]
        if self.loaded_times or self.subnet_times:
            from hetflow.model.subnet import subnet_key

            key = subnet_key(layers)
            # a group's members are alike (else it is asked per member): their mean, more
            # samples than one member's (on the 2-core VM one member's second was 1.7x slow)
            loaded = [self.loaded_times[(m, key)] for m in members if (m, key) in self.loaded_times]
            if loaded:
                return sum(loaded) / len(loaded)
            t = self.subnet_times.get((el, key))
            if t is not None:
                return t * self.contention.get(el, 1.0)
        col = self.element_index[el]
        return float(sum(self.layer_times[self.layer_index[l], col] for l in layers)
                     + self.element_overhead.get(el, 0.0))


@dataclass
class Metrics:
    throughput: float  # frames/s
    latency: float  # s, one frame through the pipeline in steady state
    latency_isolated: float  # s, one frame alone
    utilisation: dict[str, float]  # element -> busy fraction
    energy_per_frame: float | None  # J, None if powers are unknown
    peak_memory: dict[str, int]  # element -> bytes of weights + FIFO buffers
    stage_times: dict[str, float]  # actor -> busy time per frame (sum of its phases)
    critical: list[str] = field(default_factory=list)
    lanes: dict[str, int] = field(default_factory=dict)  # GPU element -> lanes analysed
    batch: dict[str, int] = field(default_factory=dict)  # element -> batch analysed (b > 1)

    def to_dict(self):
        return dict(self.__dict__)


def build_app(problem: Problem, mapping: Mapping) -> CsdfApp:
    for actor in mapping.actors:
        for e in group_members(actor):
            problem.element(e)
    problem.check_elements_compatible(mapping.elements)
    for e, b in mapping.batch.items():
        problem.check_batch(e, b)
    return cnn_to_csdf(problem.graph, mapping.assignment, mapping.policy)


def _is_uniform(problem: Problem, mapping: Mapping, actor: str) -> bool:
    """A round-robin group of identical elements: exactly an actor with concurrency k."""
    members = group_members(actor)
    keys = {(problem.element(e).equivalence_key, mapping.batch_of(e)) for e in members}
    return len(keys) == 1 and mapping.pattern(actor) == list(range(len(members)))


def actor_batches(problem: Problem, mapping: Mapping, app: CsdfApp) -> dict[str, int]:
    """{actor: its SDF rate in frames a firing} for the batched actors that fire as one: an
    element, or a uniform group of members of one batch. A batched member of an unlike group
    enters its group's rate instead (timed_graph)."""
    out = {}
    for a in app.phases:
        members = group_members(a)
        b = mapping.batch_of(members[0])
        if b > 1 and (len(members) == 1 or _is_uniform(problem, mapping, a)):
            out[a] = b
    return out


def frames_per_iteration(batches: dict[str, int]) -> int:
    """Frames one iteration of a connected timed graph carries: every channel carries a
    frame's tokens on both sides, so the repetition vector fires actor a lcm / batch(a)
    times."""
    return math.lcm(1, *batches.values())


def frame_parts(g: CsdfGraph, batches: dict[str, int]) -> list[tuple[CsdfGraph, int]]:
    """The weakly connected parts of `g` (actors whose layers share only the model's inputs
    have no channel between them), each with the frames its iteration carries: the repetition
    vector is each part's own, so an iteration of one batched part is b frames where another's
    is one."""
    part = {a.name: a.name for a in g.actors}

    def root(a):
        while part[a] != a:
            part[a] = part[part[a]]
            a = part[a]
        return a

    for c in g.channels:
        part[root(c.src)] = root(c.dst)
    groups: dict[str, list[str]] = {}
    for a in g.actors:
        groups.setdefault(root(a.name), []).append(a.name)
    if len(groups) == 1:
        return [(g, frames_per_iteration(batches))]
    return [(CsdfGraph(g.name, [a for a in g.actors if a.name in names],
                       [c for c in g.channels if c.src in names]),
             frames_per_iteration({a: b for a, b in batches.items() if a in names}))
            for names in map(set, groups.values())]


def check_batches(problem: Problem, mapping: Mapping, app: CsdfApp | None = None) -> None:
    """DeadlockError naming the actors and what they wait for where the mapping's batches
    cannot fill in the graph `evaluate` analyses (its channels bounded as the runtime's): a
    batch in a round trip through an element that fires each frame's phases in turn, or
    behind a channel that bypasses it and holds fewer frames than the batch waits for."""
    app = app or build_app(problem, mapping)
    batches = actor_batches(problem, mapping, app)
    if batches:
        for sub, _ in frame_parts(timed_graph(problem, app, mapping), batches):
            check_liveness(sub)


def saturated_latency(problem: Problem, mapping: Mapping, app: CsdfApp | None = None) -> float:
    """Seconds a frame takes in a run fed as fast as the plan takes frames (a throughput run,
    the bench's): the latency graph with the engine's own channel windows, each one frame
    larger (a producer computes its next frame before it waits for room to hand it on), its
    sources not clocked (`dataflow.analysis.saturated_latency`). Above `evaluate`'s latency
    where a stage after the first is the slowest: every frame waits in front of it. NaN where
    the analysis finds no periodic regime in its iteration limit. `app`: the mapping's, if
    built already."""


    app = app or build_app(problem, mapping)
    windows = channel_windows(mapping, app, problem.capacity_frames)
    g = timed_graph(problem, app, mapping, for_latency=True,
                    capacities={c: w + 1 for c, w in windows.items()})
    orders = firing_orders(mapping, app)
    batches = actor_batches(problem, mapping, app)
    try:
        if batches:  # full batches, each part of the graph on its own (frame_parts)
            return max(analysed(sub) for sub, _ in frame_parts(g, batches))
        return analysed(unfolded(g, mapping.round_frames), orders=orders or None)
    except StateSpaceLimitError:
        return float("nan")


def timed_graph(problem: Problem, app: CsdfApp, mapping: Mapping | None = None,
                capacity_frames: int | None = None, for_latency: bool = False,
                capacities: dict[str, int] | None = None, batched_rates: bool = True,
                fills: dict[str, float] | None = None, padded: dict[str, int] | None = None,
                busy_lanes: dict[str, float] | None = None):
    """The timed CSDF graph of `app`.

    A group of identical round-robin members is an actor with concurrency k (exact). A group
    with a weighted pattern or unlike members is, for throughput, an actor with concurrency 1
    whose phase takes, with static dispatch, max over members of (frames it gets per period x
    its time) / period -- the rate its slowest member allows -- and with dynamic dispatch (the
    next frame to whichever member is free) 1 / the sum of the members' rates; `for_latency`,
    an actor with concurrency k whose phase takes the slowest member's time (what the worst
    frame sees). All approximations (the dynamic one read data-parallel plans on the GPU
    machine at 0.76-1.28 of measured; the pattern bound was low for all nine CNNs).

    A GPU member with k lanes counts as k members (concurrency k) whose firing takes its
    one-lane time times the measured slowdown at k lanes; in a group of unlike members its rate
    is k / that time. `capacities` ({channel: frames}) replaces the FIFO sizes otherwise derived
    from `capacity_frames`.

    A batched element (Mapping.batch) fires on b frames: its firing takes the one-frame time
    times the profile's batch factor at its lanes (a padded partial batch costs as much), and
    an element or uniform group of it is an actor of rate b (`actor_batches`; an iteration then
    carries `frames_per_iteration` frames), whose FIFOs hold their frame count in batches. In
    an unlike group a batched member's rate is k * b / its firing time; `fills` ({element: s},
    `member_fills`) adds to its first phase `for_latency` the wait of its frames for their
    batch, the slowest member's fill and firing being the worst frame's (a frame behind it
    leaves only after it). `batched_rates` False: every actor at rate one, a batched firing
    serving one frame (a stream so slow that each frame fires alone, padded). `padded`
    ({element: b}): a firing of the mapping's batch there (a partial batch) runs padded to b,
    taking t(b, k), after its frames' staging. `busy_lanes` ({element: j}, 1 <= j <= k,
    fractional): its firings are timed as j of its k lanes busy see them (frames on a clock
    too slow to keep all busy).
    """
    mapping = mapping or Mapping(app.assignment)
    fills = fills or {}
    uniform = {a: _is_uniform(problem, mapping, a) for a in app.phases}
    busy = len(set(mapping.elements)) > 1
    lanes = {e: problem.lanes_in(mapping, e) for e in mapping.elements}

    def firing(layers, who, border_bytes):  # an element, or a uniform group (its members' mean)
        t = problem.actor_time(layers, who)
        e = group_members(who)[0]
        k = (busy_lanes or {}).get(e, lanes.get(e, 1))
        if k > 1 or e in problem.lane_slowdown_busy:
            t *= problem.slowdown(e, k, busy, problem.stage_key(layers))
        b = mapping.batch_of(e)
        run = (padded or {}).get(e, b)
        if run > 1:  # b frames a firing: their borders b times over
            t *= problem.batch_factor(e, run, k, busy)
            border_bytes *= b
        if padded and e in padded:
            # a batch on a clock: its b frames are staged from wherever each landed before
            # it runs (the profile's batches restaged one frame, cache-hot)
            t += problem.staging_seconds(e, border_bytes, b)
        whole = len(layers) == len(problem.graph.layers)  # timed with its borders and host work
        if (e in problem.border_cost and not whole
                and not (problem.loaded_times
                         and (e, subnet_key(layers)) in problem.loaded_times)):
            fixed, per_byte = problem.border_cost[e]
            t += (fixed + per_byte * border_bytes) * problem.contention.get(e, 1.0)
        host = problem.host_seconds(e, border_bytes, busy, k, rows=b)
        if k > 1 and host:  # one driving thread launches and collects every lane's firings
            return max(t + problem.call_overhead, k * (host + problem.call_overhead))
        one = problem.host_time.get(e, {}).get(1)
        if k == 1 and one is not None and not whole:
            # one lane: the host stages the inputs, launches, waits and copies the outputs out
            # before and after the device work, not beside it (a whole-model firing was timed
            # with all of that in it). Phases of googlenet and densenet121 fired frame by frame
            # on one lane took 0.33-0.35 ms each above their device time on the H200 machine
            t += one + problem.staging_seconds(e, border_bytes, b)
        return t + problem.call_overhead

    def phase_time(p):
        members = group_members(p.actor)
        nbytes = sum(problem.graph.tensors[t].nbytes for t in (*p.inputs, *p.outputs))
        if uniform[p.actor] or len(members) == 1:
            return firing(p.layers, p.actor, nbytes)
        times = [firing(p.layers, e, nbytes) for e in members]
        pat = mapping.pattern(p.actor)
        if for_latency:  # the slowest member's frame, its batch filled before its first phase
            return max(t + (fills.get(e, 0.0) if p.index == 0 else 0.0)
                       for m, (e, t) in enumerate(zip(members, times)) if m in pat)
        frames = [lanes.get(e, 1) * mapping.batch_of(e) for e in members]  # a member's firing
        if mapping.dispatch_mode == "dynamic":
            return 1.0 / sum(f / t for f, t in zip(frames, times))
        return max(pat.count(m) * t / frames[m] for m, t in enumerate(times)) / len(pat)

    def transfer(c):
        return problem.transfer(c.nbytes, group_members(c.src)[0], group_members(c.dst)[0])

    def concurrency(a):
        members = group_members(a)
        if len(members) == 1 or uniform[a] or for_latency:
            return sum(lanes.get(e, 1) for e in members)
        return 1

    conc = {a: concurrency(a) for a in app.phases}
    rates = actor_batches(problem, mapping, app) if batched_rates else {}

    def batches(c):  # a batched end's FIFO holds its frame count in batches
        return max(rates.get(c.src, 1), rates.get(c.dst, 1))

    if capacities is not None:
        return app.to_graph(phase_time, transfer,
                            {c.name: capacities[c.name] * batches(c) for c in app.channels
                             if c.name in capacities}, conc, rates)
    cap = problem.capacity_frames if capacity_frames is None else capacity_frames
    extra = extra_windows(mapping, app)  # interleaved producers run rounds ahead
    if not for_latency:
        # a weighted group's FIFOs hold a pattern period of frames, a laned actor's FIFOs a
        # window per lane (see the runtime)
        return app.to_graph(phase_time, transfer, {c.name: cap * batches(c) * max(
            len(mapping.pattern(c.src)), len(mapping.pattern(c.dst)), conc[c.src], conc[c.dst])
            + extra.get(c.name, 0) for c in app.channels}, conc, rates)
    return app.to_graph(phase_time, transfer,
                        {c.name: cap * batches(c) + extra.get(c.name, 0) for c in app.channels},
                        conc, rates)


def evaluate(problem: Problem, mapping: Mapping, with_latency: bool = True) -> Metrics:


    if problem.contention and len(set(mapping.elements)) == 1 and not problem.loaded_times:
        problem = problem.alone
    app = build_app(problem, mapping)
    g = timed_graph(problem, app, mapping)
    # rounds of several frames: analysed on the graph unfolded that many times (one iteration
    # = one round), frames/s = rounds/s x frames per round
    k = mapping.round_frames
    orders = firing_orders(mapping, app)
    batches = actor_batches(problem, mapping, app)
    if batches:  # multi-rate: each part's iteration carries its own frames (no rounds, orders)
        res, frames = min(((throughput_mcr(sub), f) for sub, f in frame_parts(g, batches)),
                          key=lambda x: x[0].throughput * x[1])
        thr = res.throughput * frames
    else:
        res = throughput_mcr(unfolded(g, k), orders or None)
        thr = res.throughput * k
    stage = {a: sum(problem.actor_time(p.layers, a) + problem.call_overhead for p in ps)
             for a, ps in app.phases.items()}
    loaded = len(set(mapping.elements)) > 1
    lanes = {e: problem.lanes_in(mapping, e) for e in mapping.elements
             if e in problem.lane_slowdown or e in mapping.lanes}
    util = {}
    for a in app.phases:
        members = group_members(a)
        # an element's busy time per frame; k lanes share one device, each firing slowed
        busy = [sum((problem.actor_time(p.layers, e)
                     * problem.slowdown(e, lanes.get(e, 1), loaded, problem.stage_key(p.layers))
                     * problem.batch_factor(e, mapping.batch_of(e), lanes.get(e, 1), loaded)
                     / lanes.get(e, 1) + problem.call_overhead) / mapping.batch_of(e)
                    for p in app.phases[a])
                for e in members]
        pat = mapping.pattern(a)
        shares = [pat.count(m) / len(pat) for m in range(len(members))]
        if mapping.dispatch_mode == "dynamic" and not _is_uniform(problem, mapping, a):
            shares = [(1 / b) / sum(1 / x for x in busy) for b in busy]  # as fast as it goes
        for e, b, share in zip(members, busy, shares):
            util[e] = min(1.0, b * share * thr) if np.isfinite(thr) else 0.0
    energy = frame_energy({e: f for e in util if (f := problem.element_power(e)) is not None},
                          util, thr, {e: problem.lanes_in(mapping, e) for e in util},
                          {e: mapping.batch_of(e) for e in util},
                          {e: partial(problem.relative_rate, e) for e in util
                           if e in problem.lane_slowdown})
    mem = {}
    for a, ps in app.phases.items():
        w = sum(problem.graph.layer(l).param_bytes for p in ps for l in p.layers)
        buf = sum(c.nbytes * problem.capacity_frames * len(mapping.pattern(a))
                  for c in app.channels if c.dst == a)
        for e in group_members(a):
            mem[e] = w + buf
    lat = lat_iso = float("nan")
    if with_latency:
        rates = arrival_rates(mapping, thr)
        lg = timed_graph(problem, app, mapping, for_latency=True)
        # with rounds of k frames, the steady latency is a round's (its first frame's first
        # firing to its last frame's last): an upper bound on each frame's
        if batches:
            parts = [latency(sub) for sub, _ in frame_parts(lg, batches)]
            lat, lat_iso = max(r.steady for r in parts), max(r.isolated for r in parts)
        else:
            lr = latency(unfolded(lg, k), orders=orders or None)
            lat, lat_iso = lr.steady, (lr.isolated if k == 1 else isolated_latency(lg))
        lat += left_out_fill(problem, mapping, app, rates)
    return Metrics(thr, lat, lat_iso, util, energy, mem, stage, list(res.critical), lanes,
                   {e: b for e, b in mapping.batch.items() if b > 1})


def arrival_rates(mapping: Mapping, throughput: float) -> dict[str, float]:
    """{batched element: frames/s its batches fill at, at `throughput`}: a dynamic dispatch
    hands a batched lane a block of consecutive frames (`plan.schedule.Dispatch`), which come
    at the stream's rate; a static pattern gives a member its share of them."""
    out = {}
    for a in mapping.actors:
        members = group_members(a)
        pat = mapping.pattern(a)
        for m, e in enumerate(members):
            if mapping.batch_of(e) > 1:
                out[e] = throughput * (1.0 if mapping.dispatch_mode == "dynamic"
                                       else pat.count(m) / len(pat))
    return out


def member_fills(problem: Problem, mapping: Mapping, app: CsdfApp, rates: dict[str, float],
                 full: bool, median: bool = False) -> dict[str, float]:
    """{batched member of an unlike group: seconds a frame waits for its batch} at `rates`
    (`batch_fill`): such a member enters its group's rate, not the graph as an actor of rate
    b, so the graph does not wait for its batch."""
    rated = actor_batches(problem, mapping, app)
    return {e: batch_fill(mapping, e, rates.get(e, 0.0), full, median)
            for a in app.phases if a not in rated
            for e in group_members(a) if mapping.batch_of(e) > 1}


def batch_fill(mapping: Mapping, element: str, rate: float, full: bool = False,
               median: bool = False) -> float:
    """Seconds the first frame of a batch of `element` waits for it at `rate` frames/s
    arriving there, evenly spaced: up to its batch wait, the other b - 1 frames' arrival
    (`full`: all of it, as where lanes are busy and a batch fills while it waits for one).
    `median`: the median frame's wait instead: the batch fires with the n frames come by then,
    the i-th having waited i / rate less than the first."""
    b = mapping.batch_of(element)
    if b == 1:
        return 0.0
    fill = (b - 1) / rate if rate > 0 else math.inf
    fill = fill if full else min(mapping.batch_wait.get(element, 0.0), fill)
    if not median or not math.isfinite(fill):
        return fill
    n = b if full else batch_frames(mapping, element, rate)
    return fill - (n - 1) / (2 * rate)


def batch_frames(mapping: Mapping, element: str, rate: float) -> int:
    """Frames a batch of `element` holds with frames arriving at `rate` frames/s evenly
    spaced: b where they fill it within its wait, else those come by the end of the wait."""
    b = mapping.batch_of(element)
    if b == 1 or rate <= 0:
        return 1
    wait = mapping.batch_wait.get(element, 0.0)
    return min(b, math.floor(wait * rate + 1e-9) + 1)


def left_out_fill(problem: Problem, mapping: Mapping, app: CsdfApp,
                  rates: dict[str, float]) -> float:
    """The batch fill the timed graph leaves out, at the plan's own rate (lanes busy, batches
    full): a batched actor (`actor_batches`) fed by the model's inputs has all of its
    iteration's frames at once, where they arrive one by one (a batched actor after another
    waits in the graph for its producers' firings); and a batched member of an unlike group,
    anywhere, enters its group's rate, not the graph. At the plan's rate such a member's lanes
    never idle, so each finds its next block already come: the b - 1 frames that came after a
    block's first wait in the group ahead of any later frame, whichever member takes it (a
    simulation of the dispatch paced at 0.9 of the rate read the worst frame at 0.8-1.15 of
    this, where the slowest member's fill and firing alone was up to 1.5x low)."""
    rated = actor_batches(problem, mapping, app)
    fed = {a for actors in app.model_inputs.values() for a in actors if a in rated}
    unlike = member_fills(problem, mapping, app, rates, full=True)
    return (max((batch_fill(mapping, e, rates.get(e, 0.0), full=True)
                 for a in fed for e in group_members(a)), default=0.0)
            + sum(max((unlike[e] for e in group_members(a) if e in unlike), default=0.0)
                  for a in app.phases))


def lanes_busy_at(problem: Problem, app: CsdfApp, held: Mapping, rate: float,
                  padded: dict[str, int]) -> dict[str, float]:
    """{element that is an actor of its own, with k > 1 lanes: the lanes its firings keep
    busy on average with every frame coming to it at `rate` frames/s} (Little's law: firings a second x
    a firing's time at that many lanes busy; at least one, at most k; the fixed point, lanes
    interpolated between measured counts). `held`: the mapping with each batch at the frames
    a firing holds at the rate. A b32 firing of mobilenet_v2 on an H200 took 4.5 ms on one lane
    and 11.4 ms beside three more: at 1,000 frames/s, 5 frames a firing, one lane is busy."""
    out: dict[str, float] = {}
    for e in dict.fromkeys(held.elements):
        k = problem.lanes_in(held, e)
        if k <= 1 or e not in app.phases or rate <= 0:
            continue
        firings = rate / held.batch_of(e)  # a second
        # a lane's device work, its frames' staging left out (the device is not busy then)
        staged = problem.staging_seconds(e, held.batch_of(e) * sum(
            problem.graph.tensors[t].nbytes for p in app.phases[e]
            for t in (*p.inputs, *p.outputs)), held.batch_of(e)) if e in padded else 0.0
        j = 1.0
        for _ in range(30):
            lg = timed_graph(problem, app, held, for_latency=True, padded=padded,
                             busy_lanes={**out, e: j})
            t = sum(next(a for a in lg.actors if a.name == e).exec_times) - staged
            nj = min(float(k), max(1.0, firings * t))
            if abs(nj - j) < 1e-4:
                break
            j = nj
        out[e] = j
    return out


def batched_takers(mapping: Mapping) -> tuple[Mapping, dict[str, str]] | None:
    """(`mapping` with each dynamically dispatched group that has one batched member replaced
    by that member, {group: that member}); None where no group has one. Such a member's lanes
    each take the frames their batch lacks in one block as they start gathering
    (`Dispatch.take_block`), so while it keeps up with the stream the other members get few
    frames: at 500 frames/s on the H200, squeezenet1_0's GPU x4 b32 took 483 of them, each of
    four core groups beside it 4."""
    if mapping.dispatch_mode != "dynamic":
        return None
    takers = {}
    for a in mapping.actors:
        batched = [e for e in group_members(a) if mapping.batch_of(e) > 1]
        if len(group_members(a)) > 1 and len(batched) == 1:
            takers[a] = batched[0]
    if not takers:
        return None
    return replace(mapping, assignment={layer: takers.get(a, a)
                                        for layer, a in mapping.assignment.items()},
                   dispatch={a: p for a, p in mapping.dispatch.items() if a not in takers}
                   ), takers


def taken_latency(problem: Problem, mapping: Mapping, rate: float, median: bool) -> float:
    """`latency_at_rate` of `mapping` as its groups' batched members take their frames
    (`batched_takers`), where that member keeps up with `rate` and every other member's frame
    is through no later than a batch's first frame would be on it; else inf. Frames leave in
    order, so a frame another member holds longer holds back every frame after it: 12 cores
    each running resnet18 (26 ms a frame) beside the GPU x4 b32 took 88 of 1,000 frames/s,
    and the stream's median frame took 20 ms where the GPU's own took 8."""
    found = batched_takers(mapping)
    if found is None:
        return math.inf
    taker, takers = found
    first = latency_at_rate(problem, taker, rate)  # a batch's first frame: it waits longest
    if not math.isfinite(first):  # the members alone do not keep up
        return math.inf
    for group, member in takers.items():
        for other in group_members(group):
            if other == member:
                continue
            alone = replace(taker, assignment={layer: other if mapping.assignment[layer] == group
                                               else a for layer, a in taker.assignment.items()})
            if evaluate(problem, alone).latency_isolated > first:
                return math.inf
    return latency_at_rate(problem, taker, rate, median) if median else first


def latency_at_rate(problem: Problem, mapping: Mapping, rate: float, median: bool = False
                    ) -> float:
    """Seconds a frame takes at `rate` frames/s arriving on a clock: each batched element's
    batch fires with the frames that came within its wait (`batch_frames`), padded to its
    batch (a firing costs t(b, k) whatever it holds), so the timed graph takes those frames a
    firing, paced at `rate`; plus each batched stage's fill at the frames it receives
    (`batch_fill`): the first frame's of a batch, or with `median` the median frame's. inf
    where `rate` is above what that graph takes (frames then queue without bound; a plan fed
    as fast as it goes fills its batches: `evaluate`'s latency)."""
    taken = taken_latency(problem, mapping, rate, median)
    if math.isfinite(taken):  # its groups' frames go to their batched members
        return taken
    if problem.contention and len(set(mapping.elements)) == 1 and not problem.loaded_times:
        problem = problem.alone
    rates = arrival_rates(mapping, rate)
    app = build_app(problem, mapping)  # (checks the batches; a partial one runs padded)
    held = replace(mapping, batch={e: batch_frames(mapping, e, rates.get(e, 0.0))
                                   for e in mapping.batch})
    fills = member_fills(problem, mapping, app, rates, full=False, median=median)
    padded = {e: b for e, b in mapping.batch.items() if b > 1}
    lg = timed_graph(problem, app, held, for_latency=True, fills=fills, padded=padded,
                     busy_lanes=lanes_busy_at(problem, app, held, rate, padded))
    batches = actor_batches(problem, held, app)
    steady = 0.0
    for sub, frames in (frame_parts(lg, batches) if batches else [(lg, 1)]):
        res = latency(sub, period=frames / rate)
        # a graph that cannot take frames that fast throttles its sources: a clock does not
        # wait, and the frames it cannot take queue without bound
        if not math.isfinite(res.steady) or res.period > (1.0 + 1e-9) * frames / rate:
            return math.inf
        steady = max(steady, res.steady)
    fill = sum(max((batch_fill(mapping, e, rates[e], median=median) for e in group_members(a)
                    if e in rates and e not in fills), default=0.0) for a in app.phases)
    return steady + fill
