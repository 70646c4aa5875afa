"""Local runtime vs Ray engine on one node, same plan, measured in one run; and the network model
behind docs/ray.md (how many edge nodes before the network dominates).

    python -m hetflow.bench.ray_bench [--model resnet18] [--frames 200] [--rounds 3]
    python -m hetflow.bench.ray_bench --scaling [--mbps 1000] [--latency-ms 0.5]

The overhead run profiles the model on this machine (cached like `hetflow bench`), picks the best
two-stage split cpu0 -> cpu1 by predicted throughput (or, with --plan search, what the pipeline
strategy picks), starts both engines once, then alternates local and Ray rounds so that both see
the same background load; it prints every round's ratio and the median, and writes them as
Markdown where `--write FILE` says (the repository keeps them in docs/results/ray_overhead.md).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hetflow.io import atomic_write_text
from hetflow.model.graph import CnnGraph



def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- the plan ----------------------------------------------------------------------------------
def two_stage_plan(graph: CnnGraph, problem, platform_name: str, first: str = "cpu0",
                   second: str = "cpu1"):
    """The contiguous split of the layer order over `first` -> `second` whose slower stage
    (layer times + one call overhead, or the border transfer) is fastest: the pipeline
    strategy's objective, restricted to these two elements."""
    from hetflow.dataflow.csdf import cnn_to_csdf
    from hetflow.mapping.mapping import Mapping
    from hetflow.mapping.plan import Plan

    names = [l.name for l in graph.layers]
    best = None
    for cut in range(1, len(names)):
        assignment = {l: (first if i < cut else second) for i, l in enumerate(names)}
        app = cnn_to_csdf(graph, assignment, "maximal")
        stage = {a: sum(problem.actor_time(p.layers, a) + problem.call_overhead for p in ps)
                 for a, ps in app.phases.items()}
        link = sum(problem.transfer(c.nbytes, c.src, c.dst) for c in app.channels)
        period = max(*stage.values(), link)
        if best is None or period < best[0]:
            best = (period, assignment, app, stage)
    period, assignment, app, stage = best
    elements = {e: problem.element(e) for e in (first, second)}
    return Plan(graph.name, graph.model_hash, graph.source, platform_name,
                Mapping(assignment, "maximal"), app, elements, problem.capacity_frames,
                {"throughput": 1.0 / period, "stage_times": stage}, "two-stage", fuse=True)


def searched_plan(problem, platform_name: str):
    from hetflow.mapping.planner import search_plan

    return search_plan(problem, "pipeline", platform_name, fuse=True)[0]


# ---- the overhead benchmark ---------------------------------------------------------------------
class CompiledGraphRun:
    """The same workers driven by a Ray compiled graph instead of per-frame actor calls: one
    `execute` per frame, channels compiled once (shared memory on one node). Only for plans
    without replica groups (a compiled graph runs every node on every execute). Measured here to
    choose the engine's transport; the engine itself uses plain actor calls (docs/ray.md)."""

    def __init__(self, pipe, plan, graph: CnnGraph):
        from ray.dag import InputNode, MultiOutputNode

        from hetflow.mapping.mapping import group_members

        if any(len(group_members(a)) > 1 for a in plan.app.phases):
            raise ValueError("a compiled graph needs a plan without replica groups")
        self.inputs = list(plan.app.model_inputs)
        self.outputs = list(graph.outputs)
        with InputNode() as inp:
            refs = {t: inp[1 + i] for i, t in enumerate(self.inputs)}
            stamps = []  # every firing's stamp: a compiled graph wants every leaf as an output
            for fi in pipe.firings:
                w = pipe.workers[fi.actor]
                args = [refs[t] for t in fi.source_inputs + fi.recv]
                if fi.returns:
                    out = w.handle.fire.options(num_returns=1 + len(fi.returns)).bind(
                        inp[0], fi.phase, *args)
                    stamps.append(out[0])
                    refs.update(zip(fi.returns, out[1:]))
                else:
                    stamps.append(w.handle.fire.bind(inp[0], fi.phase, *args))
            dag = MultiOutputNode([refs[t] for t in self.outputs] + stamps)
        self.dag = dag.experimental_compile()

    def run(self, source, frames: int, warmup: int, keep, max_inflight: int = 3):
        import ray

        done, pending, kept = [], [], {}

        def collect():
            f, ref = pending.pop(0)
            values = ray.get(ref, timeout=60)
            # copy: the arrays are views of the channel's buffer, which the writer reuses
            outs = {t: np.array(v) for t, v in zip(self.outputs, values)}
            del values
            done.append(time.perf_counter())
            if keep(f):
                kept[f] = outs

        for f in range(frames):
            x = source(f)
            pending.append((f, self.dag.execute(f, *[x[t] for t in self.inputs])))
            if len(pending) > max_inflight:
                collect()
        while pending:
            collect()
        w = min(warmup, len(done) - 2)
        return (len(done) - 1 - w) / (done[-1] - done[w]), kept

    def close(self) -> None:
        self.dag.teardown()


@dataclass
class Round:
    engine: str
    throughput: float
    p50_ms: float
    checked: int
    max_abs_error: float


def cpu_seconds(labels: dict[int, str] | None = None) -> dict[str, float]:
    """CPU seconds used so far by this process and its descendants (the local Ray instance it
    started: raylet, GCS, workers), by process role (`labels`: pid -> role)."""
    import psutil

    me = psutil.Process()
    out: dict[str, float] = {}
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        role = ("driver" if p.pid == me.pid else (labels or {}).get(p.pid) or next(
            (r for r in ("raylet", "gcs_server", "ElementWorker") if r in cmd), "other"))
        out[role] = out.get(role, 0.0) + t.user + t.system
    return out


def cpu_per_frame(run: Callable[[], int], labels: dict[int, str] | None = None
                  ) -> dict[str, float]:
    """ms of CPU per frame, by process role, while `run()` streams (and returns) its frames."""
    before = cpu_seconds(labels)
    frames = run()
    after = cpu_seconds(labels)
    return {k: (v - before.get(k, 0.0)) / frames * 1e3 for k, v in after.items()
            if v - before.get(k, 0.0) > 0}


def overhead(model: str = "resnet18", frames: int = 200, warmup: int = 30, rounds: int = 3,
             plan_kind: str = "two-stage", profile_repeats: int = 10,
             object_store_mb: int = 300, max_inflight: int | None = None,
             compiled: bool = False, cpu: bool = False) -> dict[str, Any]:
    import ray

    from hetflow.bench.core import get_profile
    from hetflow.mapping.from_profile import problem_from_profile
    from hetflow.model import resolve_model
    from hetflow.platform.detect import detect_platform
    from hetflow.runtime.check import check_outputs, reference_session
    from hetflow.runtime.engine import prepare, run_prepared
    from hetflow.runtime.inputs import random_source
    from hetflow.runtime.ray_engine import RayPipeline

    graph = resolve_model(model, fuse=True)
    platform = detect_platform()
    prof, _ = get_profile(graph, platform, profile_repeats, log)
    problem = problem_from_profile(graph, prof, platform)
    plan = (two_stage_plan(graph, problem, platform.name) if plan_kind == "two-stage"
            else searched_plan(problem, platform.name))
    stages = {a: f"{ps[0].layers[0]}..{ps[-1].layers[-1]} ({sum(len(p.layers) for p in ps)} layers)"
              for a, ps in plan.app.phases.items()}
    log(f"plan: {stages}; predicted {plan.predicted['throughput']:.1f} frames/s")
    source = random_source(graph)
    ref = reference_session(graph)
    keep = lambda f: f < 8  # noqa: E731

    def checked(kept) -> tuple[int, float]:
        return len(kept), check_outputs(graph, plan.app, kept, source, ref)

    t0 = time.perf_counter()
    pp = prepare(plan, graph)
    local_start = time.perf_counter() - t0
    cores = len(platform.cores)
    t0 = time.perf_counter()
    ray.init(num_cpus=cores, object_store_memory=object_store_mb * 2 ** 20,
             include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    ray_init = time.perf_counter() - t0
    rows: list[Round] = []
    cpu_ms: dict[str, dict[str, float]] = {}
    try:
        t0 = time.perf_counter()
        pipe = RayPipeline(plan, graph)
        ray_start = time.perf_counter() - t0
        cg = CompiledGraphRun(pipe, plan, graph) if compiled else None
        try:
            for i in range(rounds):
                rep, kept, _ = run_prepared(pp, source, frames, warmup, keep)
                rows.append(Round("local", rep.throughput, rep.latency["p50"] * 1e3,
                                  *checked(kept)))
                log(f"round {i}: local {rep.throughput:.2f} frames/s")
                rep, kept = pipe.run(source, frames, warmup, keep, max_inflight=max_inflight)
                rows.append(Round("ray", rep.throughput, rep.latency["p50"] * 1e3,
                                  *checked(kept)))
                log(f"round {i}: ray   {rep.throughput:.2f} frames/s")
                if cg is not None:
                    thr, kept = cg.run(source, frames, warmup, keep)
                    rows.append(Round("ray-compiled", thr, float("nan"), *checked(kept)))
                    log(f"round {i}: ray compiled graph {thr:.2f} frames/s")
            if cpu:  # one more round of each, counting CPU time per process
                cpu_ms = {"local": cpu_per_frame(
                    lambda: run_prepared(pp, source, frames, warmup)[0].frames),
                    "ray": cpu_per_frame(lambda: pipe.run(source, frames, warmup)[0].frames,
                                         {w.info["pid"]: f"worker {el}"
                                          for el, w in pipe.workers.items()})}
        finally:
            if cg is not None:
                cg.close()
            pipe.close()
    finally:
        pp.close()
        ray.shutdown()
    local = [r for r in rows if r.engine == "local"]
    rayr = [r for r in rows if r.engine == "ray"]
    ratios = [r.throughput / l.throughput for l, r in zip(local, rayr)]
    cgr = [r.throughput / l.throughput for l, r in
           zip(local, [r for r in rows if r.engine == "ray-compiled"])]
    return {"model": model, "plan": plan_kind, "stages": stages,
            "predicted": plan.predicted["throughput"], "frames": frames, "warmup": warmup,
            "rounds": [r.__dict__ for r in rows], "ratios": ratios,
            "median_ratio": statistics.median(ratios), "compiled_ratios": cgr, "cpu_ms": cpu_ms,
            "ray_version": ray.__version__,
            "setup_s": {"local_prepare": local_start, "ray_init": ray_init,
                        "ray_workers": ray_start}, "cores": cores}


def overhead_markdown(res: dict[str, Any], command: str) -> str:
    lines = [
        "# Ray engine overhead: local runtime vs Ray on one node",
        "",
        f"Command: `{command}`",
        "",
        f"Model {res['model']} (fused), plan `{res['plan']}`: "
        + "; ".join(f"{a}: {s}" for a, s in res["stages"].items())
        + f". Predicted {res['predicted']:.1f} frames/s. {res['frames']} frames per round, "
        f"{res['warmup']} warm-up; Ray {res['ray_version']}, {res['cores']} cores. Both engines "
        "are "
        "started once, then rounds alternate local / Ray; the first 8 frames of every round are "
        "checked against the reference.",
        "",
        "| round | local frames/s | Ray frames/s | Ray / local | local p50 ms | Ray p50 ms |",
        "|---|---|---|---|---|---|",
    ]
    local = [r for r in res["rounds"] if r["engine"] == "local"]
    rayr = [r for r in res["rounds"] if r["engine"] == "ray"]
    for i, (l, r, q) in enumerate(zip(local, rayr, res["ratios"])):
        lines.append(f"| {i} | {l['throughput']:.2f} | {r['throughput']:.2f} | {q:.3f} | "
                     f"{l['p50_ms']:.1f} | {r['p50_ms']:.1f} |")
    s = res["setup_s"]
    lines += ["", f"Median Ray / local throughput: **{res['median_ratio']:.3f}** "
              f"(range {min(res['ratios']):.3f} to {max(res['ratios']):.3f}; aim >= 0.8)."]
    if res.get("compiled_ratios"):
        cg = [r for r in res["rounds"] if r["engine"] == "ray-compiled"]
        lines += ["", "Same workers driven by a Ray compiled graph (not the engine's transport; "
                  "measured to choose it): " + ", ".join(
                      f"{r['throughput']:.2f} frames/s ({q:.3f} x local)"
                      for r, q in zip(cg, res["compiled_ratios"])) + "."]
    if res.get("cpu_ms"):
        c = res["cpu_ms"]
        lines += ["", "CPU time per frame (one more round of each, ms): local engine "
                  f"{sum(c['local'].values()):.1f} (one process); Ray "
                  f"{sum(c['ray'].values()):.1f}: " + ", ".join(
                      f"{k} {v:.1f}" for k, v in sorted(c["ray"].items(), key=lambda x: -x[1]))
                  + "."]
    lines += ["", f"Setup (not in the throughput): local sessions {s['local_prepare']:.1f} s, "
              f"ray.init {s['ray_init']:.1f} s, Ray workers {s['ray_workers']:.1f} s.", ""]
    return "\n".join(lines)


# ---- the network model of docs/ray.md ----------------------------------------------------------
def stage_io_bytes(graph: CnnGraph, cuts: list[int]) -> tuple[list[int], list[int]]:
    """For contiguous stages of the layer order split before the indices `cuts`: bytes each
    stage sends and receives per frame. A tensor goes once to every later stage that reads it
    (one channel per tensor and destination, as Algorithm 2 makes them); the model input comes
    from the camera on the first stage's node, so it is not counted."""
    bounds = [0, *cuts, len(graph.layers)]
    stage_of = {}
    for s in range(len(bounds) - 1):
        for l in graph.layers[bounds[s]:bounds[s + 1]]:
            stage_of[l.name] = s
    out = [0] * (len(bounds) - 1)
    inn = [0] * (len(bounds) - 1)
    for t, producer in graph.producer.items():
        src = stage_of[producer]
        for dst in {stage_of[c] for c in graph.consumers.get(t, []) if stage_of[c] != src}:
            out[src] += graph.tensors[t].nbytes
            inn[dst] += graph.tensors[t].nbytes
    return out, inn


def network_split(graph: CnnGraph, layer_time: np.ndarray, k: int,
                  link_time: Callable[[int], float]) -> dict[str, Any]:
    """The best split of the layer order into k contiguous stages on k identical nodes, where a
    node's period is the largest of its compute, the time its NIC is busy sending and the time
    it is busy receiving (`link_time(bytes)`: full-duplex links, transfers overlapping compute as
    Ray's object transfers do; a link's latency delays frames but does not occupy it).

    A DP over cut positions, exact when no tensor is read by two later stages (then what a
    stage sends and receives depends only on its own bounds); the chosen cuts are then scored
    with the exact per-destination bytes of `stage_io_bytes`.
    """
    n = len(graph.layers)
    prefix = np.concatenate([[0.0], np.cumsum(layer_time)])
    index = graph.layer_index
    produced_at = {t: index[p] for t, p in graph.producer.items()}
    tensors = [(produced_at[t], max(index[c] for c in cs), sorted(index[c] for c in cs),
                graph.tensors[t].nbytes) for t, cs in graph.consumers.items()
               if t in produced_at and cs]
    cost = np.full((n + 1, n + 1), np.inf)
    for i in range(n):
        for j in range(i + 1, n + 1):
            send = sum(b for p, last, _, b in tensors if i <= p < j and last >= j)
            recv = sum(b for p, _, cs, b in tensors if p < i and any(i <= c < j for c in cs))
            cost[i, j] = max(prefix[j] - prefix[i], link_time(send) if send else 0.0,
                             link_time(recv) if recv else 0.0)
    best = np.full((k + 1, n + 1), np.inf)
    arg = np.zeros((k + 1, n + 1), dtype=int)
    best[0, 0] = 0.0
    for st in range(1, k + 1):
        for j in range(st, n + 1):
            cand = np.maximum(best[st - 1, :j], cost[:j, j])
            arg[st, j] = int(np.argmin(cand))
            best[st, j] = cand[arg[st, j]]
    cuts, j = [], n
    for st in range(k, 0, -1):
        j = int(arg[st, j])
        cuts.append(j)
    cuts = sorted(cuts)[1:]
    bounds = [0, *cuts, n]
    comp = [float(prefix[bounds[i + 1]] - prefix[bounds[i]]) for i in range(k)]
    out, inn = stage_io_bytes(graph, cuts)
    tx = [link_time(b) if b else 0.0 for b in out]
    rx = [link_time(b) if b else 0.0 for b in inn]
    return {"cuts": cuts, "compute_s": comp, "send_bytes": out, "send_s": tx, "recv_s": rx,
            "period_s": max(max(c, a, b) for c, a, b in zip(comp, tx, rx))}


def scaling_table(model: str, mbps: float, latency_ms: float, max_nodes: int = 8,
                  slowdown: float = 1.0, profile_repeats: int = 10) -> dict[str, Any]:
    """Per node count k: the best split over at most k nodes, its compute bottleneck and
    network times, predicted frames/s, and the frames/s the same nodes give with a free network.
    Layer times: this machine's single core, measured (cached profile), times `slowdown`."""
    from hetflow.bench.core import get_profile
    from hetflow.model import resolve_model
    from hetflow.platform.cluster import Link
    from hetflow.platform.detect import detect_platform

    graph = resolve_model(model, fuse=True)
    platform = detect_platform()
    prof, _ = get_profile(graph, platform, profile_repeats, log)
    one = min((e for e in platform.all_elements() if e.kind == "cpu"), key=lambda e: len(e.cores))
    lt = np.array([prof.layer_time(l.name, one.name) for l in graph.layers]) * slowdown
    link = Link.from_network(mbps, latency_ms)
    busy = lambda nbytes: nbytes * link.b  # noqa: E731  (what occupies a NIC: serialisation)
    rows = []
    splits, frees = [], []
    for k in range(1, max_nodes + 1):
        # the best plan with at most k nodes: a further cut may only cost
        splits.append(network_split(graph, lt, k, busy))
        frees.append(network_split(graph, lt, k, lambda b: 0.0))  # the same nodes, free network
        s = min(splits, key=lambda x: x["period_s"])
        free = min(frees, key=lambda x: x["period_s"])
        comp, net = max(s["compute_s"]), max(max(s["send_s"]), max(s["recv_s"]))
        # one frame through the chain: every stage's compute, every border's latency + bytes
        lat = sum(s["compute_s"]) + sum(link.time(b) for b in s["send_bytes"])
        fps = 1.0 / s["period_s"]
        rows.append({"nodes": k, "used": len(s["compute_s"]), "fps": fps,
                     "fps_free": 1.0 / free["period_s"],
                     "compute_ms": comp * 1e3, "network_ms": net * 1e3, "latency_ms": lat * 1e3,
                     "inflight": int(np.ceil(lat * fps)),
                     "cut_after": [graph.layers[c - 1].name for c in s["cuts"]],
                     "max_border_kb": max(s["send_bytes"]) / 1024})
    return {"model": model, "element": one.name, "whole_ms": float(lt.sum() * 1e3),
            "input_kb": sum(graph.tensors[t].nbytes for t in graph.inputs) / 1024,
            "mbps": mbps, "latency_ms": latency_ms, "slowdown": slowdown, "rows": rows}


def scaling_markdown(res: dict[str, Any]) -> str:
    lines = [f"**{res['model']}** (one {res['element']} core x {res['slowdown']:g}: "
             f"{res['whole_ms']:.1f} ms per frame; input {res['input_kb']:.0f} KiB), "
             f"{res['mbps']:g} Mbit/s, {res['latency_ms']:g} ms latency:", "",
             "| nodes (used) | frames/s | with a free network | slowest stage ms | "
             "busiest NIC ms | frame latency ms | frames in flight | largest send KiB | "
             "cut after |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['nodes']} ({r['used']}) | {r['fps']:.1f} | {r['fps_free']:.1f} | "
                     f"{r['compute_ms']:.2f} | {r['network_ms']:.2f} | {r['latency_ms']:.1f} | "
                     f"{r['inflight']} | {r['max_border_kb']:.0f} | "
                     f"{', '.join(r['cut_after']) or '-'} |")
    lost = [r for r in res["rows"] if r["fps"] < 0.9 * r["fps_free"]]
    lines += ["", f"Network-bound (below 90% of the free-network rate) from "
              f"{lost[0]['nodes']} nodes on." if lost else
              f"Not network-bound up to {res['rows'][-1]['nodes']} nodes."]
    return "\n".join(lines) + "\n"


# ---- command line ------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m hetflow.bench.ray_bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--plan", choices=["two-stage", "search"], default="two-stage")
    ap.add_argument("--max-inflight", type=int, default=None,
                    help="frames the Ray driver keeps in flight (default: the engine's)")
    ap.add_argument("--compiled", action="store_true",
                    help="also drive the workers by a Ray compiled graph (plans without replicas)")
    ap.add_argument("--cpu", action="store_true",
                    help="also count CPU time per frame of every process (driver, raylet, workers)")
    ap.add_argument("--write", type=Path, default=None, metavar="FILE",
                    help="also write the results as Markdown to FILE")
    ap.add_argument("--scaling", action="store_true", help="print the network model tables")
    ap.add_argument("--models", default="resnet18,mobilenet_v2", help="for --scaling")
    ap.add_argument("--mbps", type=float, default=1000.0)
    ap.add_argument("--latency-ms", type=float, default=0.5)
    ap.add_argument("--max-nodes", type=int, default=8)
    ap.add_argument("--slowdown", type=float, default=1.0,
                    help="for --scaling: edge node time / this machine's core time")
    args = ap.parse_args(argv)
    command = "python -m hetflow.bench.ray_bench " + " ".join(argv if argv is not None
                                                              else sys.argv[1:])
    if args.scaling:
        for m in args.models.split(","):
            print(scaling_markdown(scaling_table(m, args.mbps, args.latency_ms, args.max_nodes,
                                                 args.slowdown)))
        return
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        sys.exit("the Ray benchmark needs Ray: pip install 'hetflow[ray]'")
    res = overhead(args.model, args.frames, args.warmup, args.rounds, args.plan,
                   max_inflight=args.max_inflight, compiled=args.compiled, cpu=args.cpu)
    text = overhead_markdown(res, command.strip())
    print(text)
    if args.write is not None:
        atomic_write_text(args.write, text)
        log(f"wrote {args.write}")


if __name__ == "__main__":
    from .script import run_script

    run_script(main, "python -m hetflow.bench.ray_bench")
