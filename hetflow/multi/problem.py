"""The multi-application problem: one single-app `Problem` per application (from its profile),
the element configurations they can share, and the task DAG of an application under a mapping.

Times: each application's layer times come from its profile. Where the profile also holds the
whole model's measured time on an element, the layer times on that element are scaled so that
the whole model costs what was measured (`calibrate_to_whole`; the runtime's dispatch cost,
`call_overhead`, comes on top of each phase): layer-by-layer timing misses
fusion, cache and threading effects, and the schedulability analysis needs stage times that
add up to what the runtime will see. Measured sub-network times are used where present. Then
the profile's busy-copies run scales each element as `hetflow map` does
(`mapping.calibration`, step "contention"): the applications run at once, and a CPU group
beside a busy GPU driver ran squeezenet1_0 at p50 4.0 ms where the profile alone said 3.6.

Applications of one model (streams given by name, or one `streams=N` application) share one
profile load and one cost model. A GPU element on k lanes fires each task in its one-lane time
times `lane_factor`: the largest of the profile's lane slowdowns at up to k lanes (the whole
model's curve, alone or beside busy CPU copies, the larger), so that a firing beside fewer busy
lanes is not predicted faster than it may run. A firing of b frames (an element's batch, where
every profile on it measured that batch) takes `batch_time_factor` times one frame's at as many
lanes.

Lanes of its own. A GPU's lanes are either the element's, shared by every application on it
(a free lane takes the highest-priority firing waiting), or each application's own: its own
CUDA streams, at its own lane count and batch, so that a long batched firing of one
application never holds a lane another is waiting for. The analysis sees each application's
lanes on such an element as an element of its own (`pool_name`). The firings of all of them
run at once and slow each other; a lane firing b frames loads the device as b lanes of one
frame do, so the device holds F = sum of lanes x batch over its applications frames at once,
and each application's firing of b frames takes its time at ceil(F / b) lanes of its own model
(with one application, its own k lanes). Counted in lanes alone, a squeezenet1_0 lane beside
two resnet18 lanes of batch 8 on the H200 machine was predicted to fire in 0.88 ms and ran
1.29 ms at the median, 1.86 at p99: F = 18 frames puts it at 2.1 ms.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from hetflow.errors import DeadlockError, InfeasibleError, InputError
from hetflow.plan.mapping import Mapping, group_members
from hetflow.mapping.problem import Problem, build_app, check_batches
from hetflow.model.graph import CnnGraph
from hetflow.model.subnet import subnet_key
from hetflow.platform.spec import ProcessingElement

from hetflow.multi.schedulability import AppSchedule, Task
from hetflow.multi.spec import AppSpec
from hetflow.mapping.calibration import calibrate as calibrate_steps, profile_calibration
from hetflow.mapping.from_profile import problem_from_profile
from hetflow.mapping.strategies.base import configurations
from hetflow.model import resolve_model
from hetflow.multi.spec import check_specs
from hetflow.profile.profile import Profile


@dataclass
class AppProblem:
    spec: AppSpec
    graph: CnnGraph
    problem: Problem
    fuse: bool = False
    profile_source: str = ""
    calibration: dict[str, float] = field(default_factory=dict)  # element -> time scale
    steps: list[dict] = field(default_factory=list)  # `mapping.calibration` steps applied
    runs: dict[str, int] = field(default_factory=dict)  # element -> whole-model runs profiled

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass
class MultiProblem:
    apps: list[AppProblem]
    platform_name: str = ""
    time_stat: str = "median"  # which measured whole-model time the stage times are scaled to

    def __post_init__(self) -> None:
        check_specs([a.spec for a in self.apps])

    @property
    def elements(self) -> dict[str, ProcessingElement]:
        out: dict[str, ProcessingElement] = {}
        for a in self.apps:
            for e in a.problem.elements:
                out.setdefault(e.name, e)
        return out

    def app(self, name: str) -> AppProblem:
        return next(a for a in self.apps if a.name == name)

    def configurations(self) -> list[list[str]]:
        """Element sets every application may use together: the configurations of the first
        app's problem (all come from one platform) restricted to elements every profile has."""

        common = set.intersection(*({e.name for e in a.problem.elements} for a in self.apps))
        out = []
        for cfg in configurations(self.apps[0].problem):
            c = [e for e in cfg if e in common]
            if c and c not in out:
                out.append(c)
        if not out:
            raise InputError("the applications' profiles share no processing element; profile "
                             "them on the same platform")
        return out

    def powers(self) -> dict[str, float | None]:
        return {n: e.power_w for n, e in self.elements.items()}

    def lane_options(self, element: str) -> list[int]:
        """Lane counts to choose from on `element`: those some application's profile measured
        there, within every profile's device-memory limit ([1]: not a laned element)."""
        counts = sorted({k for a in self.apps if element in a.problem.lane_slowdown
                         for k in a.problem.lane_counts(element)})
        top = min((a.problem.lane_limit[element] for a in self.apps
                   if element in a.problem.lane_limit), default=1 << 30)
        return [k for k in counts if k <= top] or [1]

    def best_lanes(self, element: str) -> int:
        """Among `lane_options`, the count of the highest throughput by the first profile with
        a lane curve there (1 on an element without lanes)."""
        options = self.lane_options(element)
        problem = next((a.problem for a in self.apps if element in a.problem.lane_slowdown),
                       None)
        if problem is None:
            return 1
        return max(options, key=lambda k: (k / problem.slowdown(element, k, busy=True), -k))

    def batch_options(self, element: str) -> list[int]:
        """Batches to choose from on `element`: those every profile with the element measured
        there ([1]: one that did not)."""
        tables = [a.problem.batch_sizes(element) if element in a.problem.batch_slowdown else [1]
                  for a in self.apps if element in a.problem.element_index]
        return sorted(set.intersection(*map(set, tables))) if tables else [1]

    def server_options(self, element: str) -> list[tuple[int, int]]:
        """(lanes, batch) pairs to choose from on `element`."""
        return [(k, b) for k in self.lane_options(element) for b in self.batch_options(element)]


def lane_factor(problem: Problem, element: str, lanes: int) -> float:
    """A firing's time on `lanes` lanes over its time on one (see the module docstring); an
    element without a measured curve gains nothing from lanes: factor `lanes`."""
    if lanes == 1:
        return 1.0
    if element not in problem.lane_slowdown:
        return float(lanes)
    ks = [k for k in problem.lane_counts(element) if 1 < k <= lanes] + [lanes]
    return max(max(problem.slowdown(element, k, busy=False),
                   problem.slowdown(element, k, busy=True) / problem.slowdown(element, 1, True))
               for k in ks)


def batch_time_factor(problem: Problem, element: str, batch: int, lanes: int) -> float:
    """A firing of `batch` frames over one of one frame, at `lanes` lanes: the profile's batch
    table (alone or beside busy CPU copies, the larger); without one, no gain: `batch`."""
    if batch == 1:
        return 1.0
    if element not in problem.batch_slowdown:
        return float(batch)
    return max(problem.batch_factor(element, batch, lanes, busy=False),
               problem.batch_factor(element, batch, lanes, busy=True))


def pool_name(element: str, app: str) -> str:
    """The element the analysis sees for `app`'s own lanes on `element`."""
    return f"{element}[{app}]"


def device_of(name: str) -> str:
    """The element of an analysed element name (`pool_name` undone)."""
    return name.split("[", 1)[0]


def schedule_of(app: AppProblem, mapping: Mapping, own: dict[str, int] | None = None
                ) -> AppSchedule:
    """The task DAG of one frame: a task per phase of the mapped CSDF app (time = (stage time +
    call overhead) x `lane_factor` at the mapping's lanes x `batch_time_factor` at its batch),
    phase order within an actor, channels with their transfer times; with the application's
    streams and deadline, and the batches it fires in. `own`: elements where the application
    has lanes of its own -> the frames the whole device holds at once (`device_frames`; the
    factors are taken at as many lanes of this application's batch, and its tasks there are
    on `pool_name`)."""
    own = own or {}
    p = app.problem
    for actor in mapping.actors:
        if len(group_members(actor)) > 1:
            raise InputError(f"application {app.name}: replica group {actor!r} is not supported "
                             "in a multi-application plan (one element per actor)")
    csdf = build_app(p, mapping)
    index: dict[tuple[str, int], int] = {}
    tasks: list[Task] = []
    edges: list[tuple[int, int, float]] = []
    for actor, phases in csdf.phases.items():
        for ph in phases:
            index[(actor, ph.index)] = len(tasks)
            k, b = mapping.lanes_of(actor), mapping.batch_of(actor)
            if actor in own:
                k = max(k, -(-own[actor] // b))
            factor = lane_factor(p, actor, k) * batch_time_factor(p, actor, b, k)
            where = pool_name(actor, app.name) if actor in own else actor
            tasks.append(Task(ph.key, where,
                              (p.actor_time(ph.layers, actor) + p.call_overhead) * factor))
            if ph.index:
                edges.append((index[(actor, ph.index - 1)], index[(actor, ph.index)], 0.0))
    for c in csdf.channels:
        edges.append((index[(c.src, c.src_phase)], index[(c.dst, c.dst_phase)],
                      p.transfer(c.nbytes, c.src, c.dst)))
    try:
        check_batches(p, mapping, csdf)
        deadlock = None
    except DeadlockError as e:
        deadlock = str(e)
    return AppSchedule(app.name, app.spec.period, app.spec.priority, tasks, edges,
                       app.spec.streams, app.spec.deadline,
                       {pool_name(e, app.name) if e in own else e: b
                        for e, b in mapping.batch.items() if b > 1}, deadlock)


def device_frames(mp: MultiProblem, mappings: list[Mapping]) -> dict[str, int]:
    """With lanes of its own per application: each laned element used -> the frames the whole
    device holds at once, the sum over its applications of lanes x batch."""
    total: dict[str, int] = {}
    for m in mappings:
        for e in m.elements:
            if len(mp.server_options(e)) > 1:
                total[e] = total.get(e, 0) + m.lanes_of(e) * m.batch_of(e)
    return total


def own_servers(mp: MultiProblem, mappings: list[Mapping], device: dict[str, int]
                ) -> tuple[dict[str, int], dict[str, int], dict[str, float | None]]:
    """Lanes, batch and power of each application's own lanes (`pool_name`): a firing of b
    frames draws b / F of the device's power (F: `device_frames`), so each pool's power is its
    lanes' frames' share of the element's."""
    lanes, batch = {}, {}
    powers: dict[str, float | None] = dict(mp.powers())
    for a, m in zip(mp.apps, mappings):
        for e in m.elements:
            if e in device:
                pool = pool_name(e, a.name)
                lanes[pool], batch[pool] = m.lanes_of(e), m.batch_of(e)
                w = powers.get(e)
                powers[pool] = None if w is None else w * lanes[pool] * batch[pool] / device[e]
    return lanes, batch, powers


def fastest_frame(app: AppProblem) -> tuple[float, str]:
    """A lower bound of any mapping's response time (the layer DAG's longest path with every
    layer on its fastest element, no transfers, one call overhead) and the element carrying most
    of that path."""
    p, g = app.problem, app.graph
    best = np.min(p.layer_times, axis=1)
    where = np.argmin(p.layer_times, axis=1)
    finish: dict[str, float] = {}
    via: dict[str, str | None] = {}
    for l in g.layers:
        pred = max(g.preds[l.name], key=lambda q: finish[q], default=None)
        finish[l.name] = (finish[pred] if pred else 0.0) + float(best[g.layer_index[l.name]])
        via[l.name] = pred
    last = max(finish, key=finish.get)
    share: dict[str, float] = {}
    node: str | None = last
    while node is not None:
        i = g.layer_index[node]
        e = p.elements[int(where[i])].name
        share[e] = share.get(e, 0.0) + float(best[i])
        node = via[node]
    return finish[last] + p.call_overhead, max(share, key=share.get)


def check_periods(mp: MultiProblem) -> None:
    """InfeasibleError when an application's deadline (its period by default) is shorter than
    one frame takes on any mapping."""
    for a in mp.apps:
        low, element = fastest_frame(a)
        due = a.spec.relative_deadline
        if low > due:
            what = "period" if a.spec.deadline is None else "deadline"
            raise InfeasibleError(
                f"application {a.name}: no mapping meets its {what} of {due * 1e3:.3g} "
                f"ms; one frame takes at least {low * 1e3:.3g} ms even with every layer on its "
                f"fastest element (bottleneck element {element})")


# ---------------------------------------------------------------- loading from profiles


TIME_STATS = ("median", "p90", "max")


def _stat(st: dict, stat: str) -> float | None:
    """`stat` of a profile entry; profiles made before "max" was kept fall back to p90."""
    v = st.get(stat, st.get("p90") if stat == "max" else None)
    return None if v is None else float(v)


def calibrate_to_whole(problem: Problem, profile, stat: str = "median"
                       ) -> tuple[Problem, dict[str, float]]:
    """`problem` with each element's layer times scaled so the whole model costs its measured
    time (see the module docstring) and the measured sub-network times installed, and the
    factors applied. `stat` picks which measured time: the median (typical frames), or the p90
    or the largest of the profiling runs (a measured worst-case execution time, for deadline
    analysis)."""
    if stat not in TIME_STATS:
        raise InputError(f"time statistic {stat!r}: choose one of {', '.join(TIME_STATS)}")
    times = problem.layer_times.copy()
    factors = {}
    for j, e in enumerate(problem.elements):
        whole = _stat(profile.whole_model.get(e.name, {}), stat)
        total = float(np.sum(times[:, j]))
        if whole and np.isfinite(total) and total > 0:
            # the whole-model run paid one backend call, which actor_time adds per phase
            call = problem.element_overhead.get(e.name, 0.0)
            f = max(whole - call, 0.1 * whole) / total
            times[:, j] *= f
            factors[e.name] = f
    subnets = dict(problem.subnet_times)
    for e, table in profile.subnet_times.items():
        for key, st in table.items():
            subnets[(e, key)] = _stat(st, stat) or float(st["median"])
    if stat != "median":
        # the whole model as one piece (its median, or a GPU's one-lane firing from its lane
        # table) is what a whole-model mapping costs: never below the statistic asked for (on
        # the 2-core VM a bound at `max` had kept mobilenet_v2's median, 4.4 ms against 7.7)
        whole = subnet_key(l.name for l in problem.graph.layers)
        for e, st in profile.whole_model.items():
            at = _stat(st, stat)
            if at and (e, whole) in subnets:
                subnets[(e, whole)] = max(subnets[(e, whole)], at)
    return replace(problem, layer_times=times, subnet_times=subnets,
                   lane_slowdown=lane_curves_at(problem, profile, stat)), factors


def lane_curves_at(problem: Problem, profile, stat: str) -> dict[str, dict[int, float]]:
    """`problem`'s lane curves with a firing at k > 1 lanes no shorter than the `stat` of the
    firings the profile measured there (over the whole model's `stat`, the one-lane time the
    layers were scaled to): the curves are of mean firings, and a bound at the largest
    firing (`max`) must see that a device shared by k runs stretches some firings far more
    than the mean does (squeezenet1_0 on an H200 at 8 lanes: mean 1.25 ms, largest 1.69)."""
    curves = dict(problem.lane_slowdown)
    if stat == "median":
        return curves
    for e, curve in curves.items():
        table = getattr(profile, "gpu_lanes", {}).get(e, {})
        base = _stat(profile.whole_model.get(e, {}), stat)
        if not base:
            continue
        curves[e] = {k: max(r, (_stat(table[str(k)]["alone"], stat) or 0.0) / base)
                     if k > 1 and "alone" in table.get(str(k), {}) else r
                     for k, r in curve.items()}
    return curves


def find_profile(spec: AppSpec, profile_dir: Path | None, platform) -> Path:
    """The profile of `spec`: its own :profile=, else the one file `<model>.profile.json` or
    `<model>.*.profile.json` in `profile_dir` made for `platform`."""

    if spec.profile:
        return Path(spec.profile)
    if profile_dir is None:
        raise InputError(f"application {spec.name}: no profile; give --profile-dir DIR or "
                         f"{spec.model}:...:profile=FILE")
    stem = Path(spec.model).stem
    found = sorted({*Path(profile_dir).glob(f"{stem}.profile.json"),
                    *Path(profile_dir).glob(f"{stem}.*.profile.json")})
    if not found:
        raise InputError(f"application {spec.name}: no {stem}.*.profile.json in {profile_dir} "
                         f"(make one with: hetflow profile {spec.model} -o "
                         f"{Path(profile_dir) / (stem + '.PLATFORM.profile.json')})")
    if len(found) == 1:
        return found[0]
    matching = [f for f in found if Profile.load(f).platform_hash == platform.platform_hash]
    if len(matching) == 1:
        return matching[0]
    raise InputError(f"application {spec.name}: {len(matching) or 'no'} profiles in {profile_dir} "
                     f"match platform {platform.name} ({', '.join(f.name for f in found)}); "
                     "give one with :profile=FILE")


def load_app(spec: AppSpec, platform, profile_dir: Path | None = None,
             calibrate: bool = True, time_stat: str = "median") -> AppProblem:

    path = find_profile(spec, profile_dir, platform)
    prof = Profile.load_whole(path)
    fuse = bool(prof.meta.get("fused", False))
    graph = resolve_model(spec.model, None, fuse)
    problem = problem_from_profile(graph, prof, platform)  # with the GPUs' lane curves
    factors: dict[str, float] = {}
    steps: list[dict] = []
    if calibrate:  # to the whole model's time, then the steps `hetflow map` applies
        problem, factors = calibrate_to_whole(problem, prof, time_stat)
        problem, steps = calibrate_steps(problem, prof, profile_calibration(prof))
    runs = {e: int(st.get("n", 0)) for e, st in prof.whole_model.items()}
    return AppProblem(spec, graph, problem, fuse, str(path), factors, steps, runs)


FEW_RUNS = 30  # whole-model runs below which a largest or p90 time is no bound


def thin_bounds(mp: MultiProblem, used: dict[str, list[str]]) -> list[str]:
    """What to tell a user whose bounds (`--time-stat` p90 or max) rest on an element timed
    by fewer than FEW_RUNS runs of the whole model, for each application and the elements it
    uses (`used`: {application: elements}); a GPU's lane curves, timed over thousands of
    firings, are not in question. On the GPU machine mobilenet_v2 on seven cores, bounded by
    the largest of 5 runs (4.6 ms), ran 6.7 ms at p99 and missed 29 of 5,021 deadlines."""
    if mp.time_stat == "median":
        return []
    out = []
    for a in mp.apps:
        for e in used.get(a.name, []):
            n = a.runs.get(e, 0)
            if n and n < FEW_RUNS and e not in a.problem.lane_slowdown:
                out.append(f"application {a.name}: its bound on {e} takes the {mp.time_stat} of "
                           f"{n} profiling runs of the whole model there, which may not bound "
                           f"its worst (profile with --repeats {FEW_RUNS} or more)")
    return out


def load_multi_problem(specs: list[AppSpec], platform, profile_dir: Path | None = None,
                       calibrate: bool = True, time_stat: str = "median") -> MultiProblem:

    check_specs(specs)
    if time_stat != "median" and not calibrate:
        raise InputError(f"--time-stat {time_stat} needs --calibrate (layer times are medians)")
    loaded: dict[tuple[str, Path], AppProblem] = {}  # one load per model and profile
    apps = []
    for s in specs:
        key = (s.model, find_profile(s, profile_dir, platform).resolve())
        if key not in loaded:
            loaded[key] = load_app(s, platform, profile_dir, calibrate, time_stat)
        apps.append(replace(loaded[key], spec=s))
    mp = MultiProblem(apps, platform.name)
    mp.time_stat = time_stat
    return mp
