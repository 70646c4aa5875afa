"""Where does a GPU+CPU plan's run go slow late in a bench process? `hetflow bench MODEL --quick
--head-to-head ROUNDS` as the CLI runs it, its head to head replaced by an alternation that
runs the copies first in every round (the bench's swaps the order in odd rounds), each run
looked into: every thread of the process (name, the core it last ran on, the
share of a core it used, its voluntary and forced context switches), every core's busy share
from /proc/stat, and for the plan each element's frames/s from its trace; the copies' per
element frames/s from their report. Two snapshots inside each run, `SAMPLE` s apart, after the
warm-up. Usage (GPU machine):
  python scripts/slow_mode_probe.py OUT.json ROUNDS MODEL [MODEL ...]
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict

import hetflow.bench.head_to_head as h2h_module

SAMPLE = (0.5, 1.3)  # s after a run starts: the two snapshots
RUN_SECONDS = 2.0
found: list[dict] = []
candidates: list = []  # every plan the bench piloted


def snapshot() -> tuple[float, dict, list]:
    named = {t.native_id: t.name for t in threading.enumerate()}
    tasks = {}
    for tid in os.listdir("/proc/self/task"):
        base = f"/proc/self/task/{tid}"
        try:
            with open(f"{base}/stat") as fh:
                stat = fh.read()
            with open(f"{base}/status") as fh:
                status = fh.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        rest = stat[stat.rindex(")") + 2:].split()
        ctx = {k: int(v) for k, v in (ln.split(":\t") for ln in status.splitlines()
                                      if ln.endswith(tuple("0123456789")) and "ctxt" in ln)}
        tasks[tid] = {"comm": named.get(int(tid), comm), "cpu_ticks": int(rest[11]) + int(rest[12]),
                      "core": int(rest[36]), "vcsw": ctx.get("voluntary_ctxt_switches", 0),
                      "ncsw": ctx.get("nonvoluntary_ctxt_switches", 0)}
    cores = []
    with open("/proc/stat") as fh:
        for ln in fh:
            if ln.startswith("cpu") and ln[3].isdigit():
                v = [int(x) for x in ln.split()[1:]]
                cores.append((sum(v), v[3] + v[4]))  # all ticks, idle + iowait
    return time.perf_counter(), tasks, cores


def sampled(fn):
    """fn() with two snapshots taken SAMPLE s after it starts; (its result, the differences)."""
    snaps: list = []

    def sampler(t0: float) -> None:
        for at in SAMPLE:
            time.sleep(max(0.0, t0 + at - time.perf_counter()))
            snaps.append(snapshot())

    t0 = time.perf_counter()
    th = threading.Thread(target=sampler, args=(t0,), daemon=True)
    th.start()
    out = fn()
    th.join()
    (ta, a, ca), (tb, b, cb) = snaps
    hz = os.sysconf("SC_CLK_TCK")
    threads = []
    for tid, x in b.items():
        if tid in a:
            y = a[tid]
            used = (x["cpu_ticks"] - y["cpu_ticks"]) / hz / (tb - ta)
            if used > 0.02 or x["comm"].startswith("hetflow"):
                threads.append({"comm": x["comm"], "core": x["core"], "used": round(used, 3),
                                "vcsw": x["vcsw"] - y["vcsw"], "ncsw": x["ncsw"] - y["ncsw"]})
    busy = [round(1 - (ib - ia) / max(1, tb_ - ta_), 3) for (ta_, ia), (tb_, ib) in zip(ca, cb)]
    return out, {"threads": sorted(threads, key=lambda t: (t["core"], t["comm"])),
                 "core_busy": busy}


def element_fps(trace_file: str) -> dict:
    """Frames each element completed a second over the middle of the run, from its trace."""
    with open(trace_file) as fh:
        events = json.load(fh)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    spans = [(names[e["tid"]].split("/")[0], e["ts"] + e["dur"]) for e in events
             if e.get("ph") == "X"]
    end = max(t for _, t in spans)
    lo, hi = 0.2 * end, 0.9 * end
    counts: dict = defaultdict(int)
    for el, t in spans:
        if lo <= t < hi:
            counts[el] += 1
    return {el: round(n / ((hi - lo) / 1e6), 1) for el, n in sorted(counts.items())}


def instrumented(plan, graph, parallel, lanes, source, repeats=3, seconds=1.5, at_least=200,
                 check="none", log=lambda m: None):
    from hetflow.runtime.api import run_plan
    from hetflow.runtime.baselines import measure_parallel
    from hetflow.runtime.pilot import frames_for

    from hetflow.mapping.mapping import describe_design

    def design(p) -> str:
        return describe_design(p.app.phases, p.mapping.lanes)

    # the copies' own design run by the engine: one replica group of every parallel element
    names = {e.name for e in parallel}
    same = [p for p in candidates if len(p.app.phases) == 1
            and set(next(iter(p.app.phases)).split("|")) == names]
    sides = [("plan", plan)] + ([("copies_design", same[0])]
                                if same and design(same[0]) != design(plan) else [])
    log("probe sides: " + "; ".join(f"{s} = {design(p)}" for s, p in sides))
    rounds = []
    for i in range(repeats):
        log(f"probe round {i + 1}/{repeats}")
        rep, look = sampled(lambda: measure_parallel(graph, parallel, source, warmup=5,
                                                     seconds=RUN_SECONDS, lanes=lanes))
        rounds.append({"side": "copies", "fps": rep.throughput,
                       "element_fps": {k: round(v, 1) for k, v in
                                       rep.notes["per_element_fps"].items()}, **look})
        for side, p in sides:
            frames = frames_for(p, RUN_SECONDS, at_least)
            with tempfile.NamedTemporaryFile(suffix=".json") as tf:
                rep, look = sampled(lambda: run_plan(p, graph, frames, max(5, frames // 10),
                                                     check="none", trace_path=tf.name))
                el = element_fps(tf.name)
            rounds.append({"side": side, "fps": rep.throughput, "element_fps": el, **look})
        log("  " + ", ".join(f"{r['side']} {r['fps']:.0f}" for r in rounds[-1 - len(sides):])
            + " frames/s")
    found.append({"model": graph.name, "sides": {s: design(p) for s, p in sides},
                  "rounds": rounds})
    return h2h_module.summary([r["fps"] for r in rounds if r["side"] == "plan"],
                              [r["fps"] for r in rounds if r["side"] == "copies"])


def main(out: str, rounds: int, models: list[str]) -> None:
    import hetflow.runtime.pilot as pilot_module
    from hetflow.cli.main import app

    h2h_module.head_to_head = instrumented  # the bench looks it up at each call
    choose = pilot_module.choose_by_pilot

    def recording(cands, *args, **kw):
        candidates.extend(p for p, _ in cands)
        return choose(cands, *args, **kw)

    pilot_module.choose_by_pilot = recording
    for m in models:
        candidates.clear()
        try:
            app(["bench", m, "--quick", "--strategies", "single,pipeline", "--pilots", "3",
                 "--head-to-head", str(rounds)], standalone_mode=False)
        finally:
            with open(out, "w") as fh:
                json.dump(found, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
