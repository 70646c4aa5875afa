"""`hetflow map-multi A.onnx:period=20ms:priority=1 B.onnx:period=33ms ... -o MULTI.json` and
`hetflow run-multi MULTI.json`: several CNNs sharing the machine, each at its own period (and
`resnet18:period=33ms:deadline=100ms:streams=120`: many camera streams of one CNN)."""
from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

import typer
from rich.table import Table

from hetflow import interrupt
from hetflow.errors import InfeasibleError, InputError
from hetflow.io import claimed, write_json

from hetflow.cli.common import check_writable, console, positive, print_json, progress
from hetflow.multi.front import write_front
from hetflow.multi.multiplan import MultiPlan, make_multiplan
from hetflow.multi.problem import load_multi_problem
from hetflow.multi.run import run_multiplan
from hetflow.multi.spec import parse_app_specs
from hetflow.multi.streams import largest_admitted, with_streams
from hetflow.plan.mapping import describe_design
from hetflow.platform import resolve_platform


def _ms(x) -> str:
    return "-" if x is None or x != x else f"{x * 1e3:.2f}"


def print_multiplan(mplan) -> None:
    p = mplan.predicted
    t = Table(title=f"multi-plan on {mplan.platform_name} (predicted, ms)")
    for c in ("app", "prio", "streams", "period", "deadline", "elements", "alone", "worst",
              "slack", "ok", "naive"):
        t.add_column(c, justify="left" if c in ("app", "elements") else "right")
    for a in mplan.apps:
        pr = a.predicted
        naive = p.get("naive", {}).get(a.name, {})
        t.add_row(a.name, str(a.priority), str(a.streams), _ms(a.period),
                  _ms(a.relative_deadline),
                  describe_design(a.plan.mapping.actors, a.plan.mapping.lanes),
                  _ms(pr.get("response_isolated")), _ms(pr.get("response_worst")),
                  _ms(pr.get("eq11_min_slack")), "yes" if pr.get("schedulable") else "NO",
                  _ms(naive.get("response_worst"))
                  + ("" if naive.get("schedulable", True) else " miss"))
    console.print(t)
    console.print("alone: one frame with the machine to itself; worst: the bound with the other "
                  "applications and streams; slack: the smallest Eq. 11 slack; naive: each "
                  "application on its fastest element; gpu0 x8: 8 lanes")
    shared = mplan.shared_elements
    if shared:
        console.print("shared elements: " + "; ".join(f"{e}: {', '.join(n)}"
                                                      for e, n in sorted(shared.items()))
                      + (" (each application on lanes of its own)"
                         if mplan.gpu_lanes == "own" else ""))
    energy = p.get("energy_j_per_s")
    s = mplan.search
    console.print((f"predicted energy {energy:.2f} J/s; " if energy is not None else "")
                  + "naive mapping "
                  + ("meets every deadline" if p.get("naive_schedulable") else "misses deadlines")
                  + f"; search: {s.get('algorithm')}, {s.get('evaluations')} mappings, "
                    f"{s.get('front_size')} on the front, {s.get('seconds', 0):.1f} s"
                  + (f" in {s['processes']} processes" if s.get("processes", 1) > 1 else ""))


def print_multi_report(report) -> None:
    t = Table(title="measured response times, release to last output (ms)")
    for c in ("app", "prio", "period", "frames", "p50", "p99", "worst", "predicted",
              "worst/pred", "missed", "checked"):
        t.add_column(c, justify="left" if c == "app" else "right")
    for r in report.apps:
        pred = r.predicted.get("response_worst")
        t.add_row(r.name, str(r.notes["priority"]), _ms(r.notes["period_s"]), str(r.frames),
                  _ms(r.latency["p50"]), _ms(r.latency["p99"]), _ms(r.latency["max"]),
                  _ms(pred), f"{r.latency['max'] / pred:.2f}" if pred else "-",
                  str(r.notes["missed"]), f"{r.checked_frames} ok" if r.checked_frames else "-")
    console.print(t)
    for r in report.apps:
        streams = r.notes.get("streams")
        if streams:  # the application's table row is all its streams together
            worst = max(streams, key=lambda x: (x["missed"], x.get("max", 0.0)))
            console.print(f"{r.name}: {len(streams)} streams; the worst, {worst['stream']}: "
                          f"{worst['frames']} frames, p99 {_ms(worst.get('p99'))} ms, worst "
                          f"{_ms(worst.get('max'))} ms, {worst['missed']} missed; streams "
                          f"missing a deadline: {sum(x['missed'] > 0 for x in streams)}",
                          highlight=False)
    split = [r for r in report.apps if "exec_s" in r.notes]
    if split:  # where the time of a long response went
        t = Table(title="each response split: firings running / waiting (ms)")
        for c in ("app", "run p50", "run p99", "run max", "wait p50", "wait p99", "wait max"):
            t.add_column(c, justify="left" if c == "app" else "right")
        for r in split:
            ex, wa = r.notes["exec_s"], r.notes["wait_s"]
            t.add_row(r.name, *(_ms(s[q]) for s in (ex, wa) for q in ("p50", "p99", "max")))
        console.print(t)
    console.print("utilisation: " + ", ".join(f"{e} {u:.0%}"
                                               for e, u in sorted(report.utilisation.items()))
                  + f"; wall {report.wall_s:.1f} s ({report.engine}); mean dispatch delay: "
                  + ", ".join(f"{e} {d * 1e6:.0f} us" for e, d in sorted(report.dispatch_s.items())))
    if report.realtime is False:
        console.print("--realtime: the OS refused SCHED_FIFO (needs root or CAP_SYS_NICE); "
                      "the processes ran under the normal policy", style="yellow")
    late = {r.name: r.notes["late_releases"] for r in report.apps if r.notes["late_releases"]}
    if late:
        console.print("frames released late (too many pending): "
                      + ", ".join(f"{n} {k}" for n, k in late.items()), style="yellow")
    if not report.complete:
        console.print("interrupted: the table covers the frames completed so far",
                      style="yellow")


def map_multi(
    apps: list[str] = typer.Argument(..., metavar="MODEL:period=20ms[:priority=1]...",
                                     help="one per application; keys period (required), "
                                          "deadline (default the period), streams=N (N "
                                          "streams of the model at one priority, named "
                                          "NAME/0..NAME/N-1), priority (lower = higher; "
                                          "default: order given), profile=FILE, name=NAME; "
                                          "a model may be given many times by name"),
    profile_dir: Optional[Path] = typer.Option(None, "--profile-dir",
                                               help="folder of <model>.*.profile.json"),
    platform: Optional[str] = typer.Option(None, "--platform", "-p",
                                           help="platform YAML, bundled name, or auto"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="multi-plan JSON"),
    algorithm: Literal["nsga2", "spea2"] = typer.Option("nsga2", "--algorithm", "-a",
                                                        help="multi-objective search"),
    pop_size: int = typer.Option(48, "--pop-size", min=2, help="population of the search"),
    generations: int = typer.Option(40, "--generations", min=1,
                                    help="generations of the search"),
    seed: int = typer.Option(0, "--seed", help="random seed of the search"),
    prefer: Literal["margin", "energy"] = typer.Option("margin", "--prefer",
                               help="which front point to write: margin (smallest largest "
                                    "response/period) or energy"),
    pareto: Optional[Path] = typer.Option(None, "--pareto", help="front as CSV (+ PNG)"),
    calibrate: bool = typer.Option(True, "--calibrate/--no-calibrate",
                                   help="scale layer times to the measured whole model"),
    time_stat: Literal["median", "p90", "max"] = typer.Option("median", "--time-stat",
                                  help="measured whole-model time the stage times are "
                                       "scaled to: median, p90 or max (a measured "
                                       "worst-case execution time)"),
    naive: bool = typer.Option(False, "--naive",
                               help="no search: write the naive plan (each application on "
                                    "its fastest element), to run it for comparison"),
    max_streams: Optional[str] = typer.Option(None, "--max-streams", metavar="APP",
                               help="find the most streams of application APP admitted "
                                    "beside the others (its streams= is ignored); writes "
                                    "the plan at that many"),
    gpu_lanes: Literal["auto", "shared", "own"] = typer.Option("auto", "--gpu-lanes",
                               help="a GPU's lanes: shared by its applications (a free lane "
                                    "takes the highest priority waiting), each "
                                    "application's own (its own lanes and batch, on streams "
                                    "of its priority), or auto: search both"),
    verify: float = typer.Option(0.0, "--verify", metavar="SECONDS", min=0.0,
                                 help="run the admitted plan here for about this long and "
                                      "admit it only if the analysis, with each task's "
                                      "longest firing there, still meets every deadline and "
                                      "the trial missed none (with --max-streams: each count "
                                      "the analysis admits; 0: the profile's times alone)"),
    json_out: bool = typer.Option(False, "--json", help="print the multi-plan as JSON"),
) -> None:
    """Map several CNNs with periods, deadlines, streams and priorities onto one machine
    (Kang et al. VI); says whether every deadline is met."""
    from hetflow.multi.search import naive_result, search_multi
    from hetflow.multi.verify import verified

    check_writable(output, pareto)
    specs = parse_app_specs(apps)
    if max_streams is not None and naive:
        raise InputError("--max-streams searches mappings; drop --naive")
    if naive and verify > 0:
        raise InputError("--verify checks an admission; --naive writes the naive plan to run "
                         "for comparison: drop one")
    plat = resolve_platform(platform or "auto")
    mp = load_multi_problem(specs, plat, profile_dir, calibrate, time_stat)
    answer = None
    if naive:
        result = naive_result(mp)
    else:
        with progress("searching ...", quiet=json_out) as log:
            def search(m):
                r = search_multi(m, algorithm, pop_size, generations, seed, prefer,
                                 progress=log, gpu_lanes=gpu_lanes)
                return r if verify <= 0 else verified(m, r, verify, f"multi-{algorithm}",
                                                      log, seed)

            if max_streams is None:
                result = search(mp)
            else:
                answer = largest_admitted(mp, max_streams, search, log)
                if answer.result is None:
                    raise InfeasibleError(f"application {max_streams}: not even one stream "
                                          f"is admitted: {answer.refused}")
                result = answer.result
                mp = with_streams(mp, max_streams, answer.streams)
    mplan = make_multiplan(mp, result, "multi-naive" if naive else f"multi-{algorithm}")
    trial = result.notes.get("verified")
    if answer is not None:
        mplan.search["max_streams"] = {"app": answer.name, "streams": answer.streams,
                                       "refused_one_more": answer.refused,
                                       "searches": answer.searches}
    if output:
        mplan.save(output)
    if pareto:
        write_front(mp, result, pareto)
    if json_out:
        print_json(mplan.to_dict())
        return
    print_multiplan(mplan)
    if answer is not None:
        console.print(f"most streams of {answer.name} admitted: {answer.streams} "
                      f"({answer.searches} searches); at {answer.streams + 1}: "
                      f"{answer.refused}")
    elif trial is not None:
        console.print(f"every deadline is met (predicted, with the longest firings of a "
                      f"{trial['seconds']:.0f} s trial run)")
    else:
        console.print("every deadline is met (predicted)" if mplan.predicted["schedulable"]
                      else "deadlines are MISSED (predicted)")
    for note in mplan.search.get("notes", []):
        console.print(f"note: {note}")
    for f in ([output] if output else []) + ([pareto] if pareto else []):
        console.print(f"wrote {f}")

def run_multi(
    plan_path: Path = typer.Argument(..., metavar="MULTIPLAN.json",
                                     help="multi-plan from hetflow map-multi"),
    frames: int = typer.Option(1000, "--frames", "-n", min=1,
                               help="measured frames of every application (faster ones "
                                    "run more while the slowest finishes)"),
    warmup: int = typer.Option(10, "--warmup", min=0, help="first frames of each app not measured"),
    check: Literal["first", "none"] = typer.Option("first", "--check",
                                                   help="first (4 frames per app) or none"),
    max_in_flight: int = typer.Option(4, "--max-in-flight", min=1,
                                      help="frames of one app held at once (bounds memory)"),
    trace: Optional[Path] = typer.Option(None, "--trace", help="write a Chrome trace JSON"),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="report JSON"),
    stall_timeout: float = typer.Option(30.0, "--stall-timeout", callback=positive,
                                        help="seconds without a completed frame before the "
                                             "run is stopped as stalled"),
    switch_interval: float = typer.Option(1e-4, "--switch-interval", min=0,
                                          help="GIL switch interval during the run, seconds "
                                               "(0: Python's 5 ms)"),
    engine: Literal["auto", "processes", "threads"] = typer.Option("auto", "--engine",
                               help="processes (one per element), threads (one process), "
                                    "or auto: processes where every application runs on "
                                    "one element, else threads"),
    realtime: bool = typer.Option(False, "--realtime",
                                  help="process engine: run the element processes under "
                                       "the SCHED_FIFO real-time policy (needs root or "
                                       "CAP_SYS_NICE; the report says if it was refused)"),
    json_out: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Run every application of a multi-plan at its period; report response times."""

    check_writable(trace, output)
    mplan = MultiPlan.load(plan_path)
    with claimed(output), claimed(trace), progress("preparing sessions ...",
                                                   quiet=json_out) as log:
        report = run_multiplan(mplan, None, frames, warmup, check,
                               max_in_flight=max_in_flight, stall_timeout=stall_timeout,
                               trace_path=trace, progress=log,
                               switch_interval=switch_interval, engine=engine,
                               realtime=realtime)
        data = {**report.to_dict(), **interrupt.marker(not report.complete)}
        if output:
            write_json(output, data)
    if json_out:
        print_json(data)
    else:
        print_multi_report(report)
        for f in ([output] if output else []) + ([trace] if trace else []):
            console.print(f"wrote {f}")
    if not report.complete:
        raise typer.Exit(interrupt.exit_code())


def register(app: typer.Typer) -> None:
    app.command("map-multi")(map_multi)
    app.command("run-multi")(run_multi)
