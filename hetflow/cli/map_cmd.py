"""`hetflow map MODEL --profile P.json --strategy NAME -o PLAN.json`."""
from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

import typer
from rich.table import Table

from hetflow import interrupt

from hetflow.cli.common import MAX_BATCH_HELP, PRECISION_HELP, TOLERANCE_HELP, check_writable, console, positive, print_json, progress, strategy_name, strategy_names
import json
from hetflow.errors import InfeasibleError, InputError
from hetflow.mapping.energy import energy_method, require_power
from hetflow.io import claimed
from hetflow.mapping.calibration import load_calibration
from hetflow.mapping.from_profile import calibrated_problem
from hetflow.mapping.pareto import least_energy, write_front
from hetflow.mapping.pilot import choose_plan, pilot_summary
from hetflow.mapping.planner import describe_stages, fitted_front, make_plan
from hetflow.plan.mapping import describe_element
from hetflow.mapping.planning import record_arrivals, record_precision, search_kind
from hetflow.model import parse_input_shapes, resolve_model
from hetflow.model.accuracy import Tolerance
from hetflow.platform import resolve_platform
from hetflow.profile.profile import Profile


PREFER = ("throughput", "energy")


def load_inputs(model: str, profile_path: Path, platform_arg: Optional[str],
                 capacity: int = 2, input_shape: Optional[list[str]] = None,
                 calibration_path: Optional[Path] = None):
    """(graph, platform, profile, calibration or None) of `hetflow map`'s arguments."""

    prof = Profile.load_whole(profile_path)
    graph = resolve_model(model, parse_input_shapes(input_shape), bool(prof.meta.get("fused")))
    platform = resolve_platform(platform_arg or "auto")
    calibration = (load_calibration(calibration_path, graph.name, platform.name)
                   if calibration_path else None)
    return graph, platform, prof, calibration


def map_model(graph, platform, prof, strategy: str, calibration: dict | None = None,
              capacity: int = 2, seed: int = 0, options: dict | None = None, pilots: int = 1,
              interleave: bool = True, log=lambda msg: None, precision: str | None = None,
              tolerance: Tolerance | None = None, prefer: str = "throughput",
              min_rate: float | None = None):
    """`hetflow map`: the cost model from the profile and its calibration (the profile's own
    busy-copies run where no calibration is given; `calibration.calibrate`), the search
    `hetflow bench` does (`planning.search_kind`), and with `pilots` above 1 the pilots'
    choice. `precision`, `tolerance`: the element precisions searched
    (`from_profile.precision_configurations`). `prefer` "energy": `least_energy_plan`; with
    any `prefer`, a plan predicted below `min_rate` is an InfeasibleError. Returns (plan, its
    search result, the pilots tried, the cost model searched)."""

    check_preference(prefer, pilots)
    options = dict(options or {})
    problem, steps = calibrated_problem(graph, prof, platform, capacity, calibration,
                                        precision, tolerance)
    if prefer == "energy":
        require_power(problem)
    fuse = bool(prof.meta.get("fused", False))
    candidates = search_kind(problem, [strategy], platform.name, pilots, seed, fuse, options,
                             log, interleave=interleave, calibration=steps)
    if prefer == "energy":
        plan, result = least_energy_plan(problem, candidates[0], platform.name, fuse,
                                         options.get("latency_cap"), interleave, min_rate)
        tried: list = []
    else:
        plan, result, tried = choose_plan(problem, candidates, graph,
                                          latency_cap=options.get("latency_cap"), log=log)
    rate = plan.predicted.get("throughput") or 0.0
    if min_rate is not None and not rate >= min_rate:
        raise InfeasibleError(f"--min-rate {min_rate:g}: the plan found is predicted at "
                              f"{rate:.1f} frames/s; no design found reaches the floor")
    if tried:
        plan.search["pilots"] = tried
    plan.search.update(prefer=prefer, **({"min_rate": min_rate} if min_rate is not None
                                         else {}))
    plan.predicted["energy_method"] = energy_method(problem, plan.mapping.elements)
    record_precision(plan, precision, tolerance)
    return plan, result, tried, problem


def front_plans(problem, result, designs: list, first, platform_name: str, fuse: bool,
                interleave: bool, precision: str | None, tolerance: Tolerance | None) -> list:
    """A plan of each design of a front (`planner.fitted_front` of the search that gave plan
    `first` and `result`), as `hetflow map` would plan it: to run each and set measured
    throughput, latency and energy per frame beside their predictions."""
    plans = []
    for mapping, metrics in designs:
        plan = make_plan(result.problem or problem, mapping, metrics, first.strategy,
                         platform_name, dict(first.search), fuse,
                         interleave=interleave and not result.scored_as_run)
        plan.predicted["energy_method"] = energy_method(problem, plan.mapping.elements)
        record_precision(plan, precision, tolerance)
        plans.append(plan)
    return plans


def save_front_plans(folder: Path, plans: list, input_shapes: dict) -> list[Path]:
    """Each plan of a front as FOLDER/MODEL.front<i>.plan.json, in the front's order."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, p in enumerate(plans):
        p.input_shapes = input_shapes
        out.append(p.save(folder / f"{p.model_name}.front{i}.plan.json"))
    return out


def least_energy_plan(problem, found: tuple, platform_name: str, fuse: bool,
                      cap: float | None, interleave: bool, min_rate: float | None) -> tuple:
    """(plan, search result) of the design with the least predicted energy per frame at
    `min_rate` frames/s or more (within the latency `cap`) on the front of the search that
    gave `found` (its best plan and result) as `--pareto` writes it (`fitted_front`: each batch
    of its GPUs fitted in, each at its fewest lanes near that batch's best)."""
    first, result = found
    mapping, metrics = least_energy(fitted_front(problem, result, cap), min_rate)
    plan = make_plan(result.problem or problem, mapping, metrics, first.strategy,
                     platform_name, dict(first.search), fuse, cap,
                     interleave=interleave and not result.scored_as_run, rate_floor=min_rate)
    return plan, result


def check_preference(prefer: str, pilots: int) -> None:
    """InputError for a `--prefer` map cannot honour: an unknown one, or energy chosen by
    pilots (they measure throughput, not energy)."""
    if prefer not in PREFER:
        raise InputError(f"--prefer {prefer!r}: use {' or '.join(PREFER)}")
    if prefer == "energy" and pilots > 1:
        raise InputError("--prefer energy chooses by prediction: pilots measure throughput, "
                         "not energy (leave out --pilots)")


def parse_options(items: Optional[list[str]]) -> dict:
    """['fitness=throughput', 'pop_size=64'] -> {'fitness': 'throughput', 'pop_size': 64}."""


    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise InputError(f"--option {item!r}: expected KEY=VALUE, e.g. fitness=throughput")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def print_plan(plan, title: str = "plan") -> None:

    t = Table(title=f"{title}: {plan.model_name}, strategy {plan.strategy}")
    for c in ("stage (actor)", "elements", "phases", "layers", "first .. last", "busy ms/frame",
              "util"):
        t.add_column(c, justify="right" if c in ("phases", "layers", "busy ms/frame", "util") else "left")
    for r in describe_stages(plan):
        elements = [describe_element(e, r["lanes"].get(e, 1), r["batch"].get(e, 1))
                    for e in r["elements"]]
        k = plan.mapping.round_frames
        phases = str(r["phases"]) + (
            f" (interleaved{f', {k} frames a round' if k > 1 else ''}, up to "
            f"{r['interleave'][0] * k + k - 1} frames ahead)" if r.get("interleave") else "")
        t.add_row(r["actor"], ",".join(elements), phases, str(r["layers"]),
                  f"{r['first']} .. {r['last']}",
                  f"{r['busy_s'] * 1e3:.3f}" if r["busy_s"] is not None else "?",
                  f"{r['utilisation']:.0%}")
    console.print(t)
    p = plan.predicted
    sat = p.get("latency_saturated")
    console.print(f"predicted: {p['throughput']:.1f} frames/s, latency {p['latency'] * 1e3:.2f} ms "
                  f"(alone {p['latency_isolated'] * 1e3:.2f} ms"
                  + (f", fed as fast as it goes {sat * 1e3:.2f} ms" if sat is not None and sat == sat
                     else "")
                  + ")"
                  + (f", {p['energy_per_frame']:.4g} J/frame ({p.get('energy_method')})"
                     if p.get("energy_per_frame") else "")
                  + f"; search {plan.search.get('seconds', 0):.2f} s")
    if p.get("at_rate"):
        console.print(at_rate_line(p["at_rate"]), highlight=False)


def at_rate_line(at: dict) -> str:
    """'at 500 frames/s on a clock (batch wait gpu0 2 ms): latency p50 4.1 ms, ...'."""
    waits = ", ".join(f"{e} {w * 1e3:g} ms" for e, w in sorted(at["batch_wait"].items()))
    head = f"at {at['rate']:g} frames/s on a clock" + (f" (batch wait {waits})" if waits else "")
    if at["latency_p50"] is None:
        return (f"{head}: above what the plan takes with partial batches; its batches fill, "
                "and the latency above holds")
    return (f"{head}: latency p50 {at['latency_p50'] * 1e3:.2f} ms, a batch's first frame "
            f"{at['latency_first'] * 1e3:.2f} ms")


def register(app: typer.Typer) -> None:
    @app.command("map")
    def map_(
        model: str = typer.Argument(..., help="ONNX file or zoo model name"),
        profile: Path = typer.Option(..., "--profile", help="profile JSON (hetflow profile)"),
        strategy: str = typer.Option("pipeline", "--strategy", "-s", callback=strategy_name,
                                     help="search strategy, one of: "
                                          + ", ".join(strategy_names())),
        platform: Optional[str] = typer.Option(None, "--platform", "-p",
                                               help="platform YAML, bundled name, or auto"),
        seed: int = typer.Option(0, "--seed", help="random seed of the search (same seed, "
                                                         "same plan)"),
        output: Optional[Path] = typer.Option(None, "-o", "--output", help="plan JSON to write"),
        capacity: int = typer.Option(2, "--capacity", min=1, help="FIFO capacity in frames"),
        json_out: bool = typer.Option(False, "--json", help="print the plan as JSON"),
        pareto: Optional[Path] = typer.Option(None, "--pareto", help="write the front as CSV (+PNG)"),
        front_dir: Optional[Path] = typer.Option(
            None, "--front-plans", help="write a plan of every design on the search's front "
                                        "into this folder (MODEL.front0.plan.json, fastest "
                                        "first), to run each and compare"),
        prefer: Literal["throughput", "energy"] = typer.Option(
            "throughput", "--prefer",
            help="which design of the search's front to plan: throughput (the fastest) or "
                 "energy (the least predicted energy per frame at --min-rate or more; nsga2 "
                 "and spea2 give fronts of many designs)"),
        min_rate: Optional[float] = typer.Option(
            None, "--min-rate", min=0.0,
            help="frames/s the plan must be predicted at (with --prefer energy, the floor "
                 "the least-energy design is chosen above)"),
        rate: Optional[float] = typer.Option(
            None, "--rate", callback=positive,
            help="frames/s a stream will arrive at, on a clock: the plan also predicts each "
                 "frame's latency at that rate (p50 and a batch's first frame), as "
                 "`hetflow run --rate` measures it"),
        batch_wait_ms: Optional[float] = typer.Option(
            None, "--batch-wait-ms", min=0.0,
            help="ms a batched element waits for a partial batch to fill before it fires "
                 "it padded (default 0: it fires the frames there)"),
        input_shape: Optional[list[str]] = typer.Option(None, "--input-shape",
                                                        help="NAME=1x3x224x224 for dynamic inputs"),
        option: Optional[list[str]] = typer.Option(None, "--option", "-O",
                                                   help="strategy option KEY=VALUE, e.g. "
                                                        "fitness=throughput (repeatable)"),
        latency_cap_ms: Optional[float] = typer.Option(None, "--latency-cap-ms",
                                                       help="best throughput within this "
                                                            "latency: the predicted one (a "
                                                            "median); with --pilots, also the "
                                                            "pilots' measured p99"),
        pilots: int = typer.Option(1, "--pilots", min=1,
                                   help="run the best N designs by prediction briefly on this "
                                        "machine and keep the one measured best"),
        calibration: Optional[Path] = typer.Option(
            None, "--calibration", help="calibration JSON (`hetflow bench --report DIR` writes "
                                        "DIR/MODEL.calibration.json): plan from the cost model "
                                        "that bench planned from (default: the profile's own "
                                        "busy-copies run, if it has one)"),
        interleave: bool = typer.Option(True, "--interleave/--no-interleave",
                                        help="let an element whose frames leave and come back "
                                             "run phases of later frames meanwhile, where the "
                                             "analysis finds it faster"),
        precision: str = typer.Option(
            "fp32", "--precision", help=PRECISION_HELP + " (auto: among those within "
                                        "--tolerance on the profile's check)"),
        tolerance: Optional[str] = typer.Option(
            None, "--tolerance", help=TOLERANCE_HELP),
        max_batch: Optional[int] = typer.Option(
            None, "--max-batch", min=1, help=MAX_BATCH_HELP),
    ) -> None:
        """Search a mapping of the model's layers onto the platform's elements; write a plan."""
        tol = Tolerance.parse(tolerance) if tolerance is not None else None
        check_writable(output, pareto)
        check_writable(front_dir, folder=True)
        check_preference(prefer, pilots)
        opts = parse_options(option)
        if latency_cap_ms is not None:
            opts["latency_cap"] = latency_cap_ms / 1e3
        graph, plat, prof, calib = load_inputs(model, profile, platform, capacity, input_shape,
                                               calibration)
        prof = prof.up_to_batch(max_batch)
        title = "pilot runs" if pilots > 1 else "search"
        # held from the search on: two maps writing one plan would both say they wrote it
        with claimed(output), claimed(pareto):
            with progress(title, quiet=json_out or pilots == 1) as log:
                plan, result, tried, problem = map_model(graph, plat, prof, strategy, calib, capacity,
                                                seed, opts, pilots, interleave, log, precision,
                                                tol, prefer, min_rate)
            if tried and not json_out:
                console.print(pilot_summary(tried), highlight=False)

            interrupt.check()  # a signal in the last pilot: no plan chosen on a cut-short run
            record_arrivals(plan, result.problem or problem, rate,
                            None if batch_wait_ms is None else batch_wait_ms / 1e3)
            if batch_wait_ms is not None and not plan.mapping.batch_wait and not json_out:
                console.print("--batch-wait-ms: the plan batches no element, so nothing waits "
                              "for a batch", highlight=False)
            # `run` loads the model with the shapes the plan was made for
            plan.input_shapes = {k: list(v) for k, v in parse_input_shapes(input_shape).items()}
            if output:
                plan.save(output)
            designs = fitted_front(problem, result) if pareto or front_dir else []
            if pareto:
                write_front(designs, pareto, problem)
            written = (save_front_plans(front_dir, front_plans(
                problem, result, designs, plan, plat.name, bool(prof.meta.get("fused", False)),
                interleave, precision, tol), plan.input_shapes) if front_dir else [])
        if json_out:
            print_json(plan.to_dict())
            return
        print_plan(plan)
        if output:
            console.print(f"wrote {output}")
        if written:
            console.print(f"wrote {len(written)} plans of the front into {front_dir}")
