"""Fronts of throughput, latency and energy per frame, every design on them run and measured.

For each model: `hetflow profile` on the platform (idle and busy power read from the counters
the machine has), `hetflow map -s nsga2 --front-plans` (a plan of every design on the front,
each predicted before any run of it), then `hetflow run` of each plan for about `--seconds`
(long enough for NVML's 100 ms counter steps). Prints a table of predicted against measured
frames/s and J/frame, and writes OUT/fronts.json (every row, with the energy method) and
OUT/fronts.md. A part without a counter (a VM, no RAPL permission) is modelled from the
platform's `power_w` in both the prediction and the run, and labelled so in every row.

    python scripts/energy_fronts.py resnet18 googlenet mobilenet_v2 -p platform.yaml -o fronts
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

MIN_FRAMES = 200


def hetflow(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hetflow", *args], capture_output=True,
                          text=True, timeout=timeout)


def step(what: str, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess | None:
    """Run one hetflow command; print its last line; None where it failed."""
    t0 = time.perf_counter()
    try:
        done = hetflow(*args, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"  {what}: timed out after {timeout:.0f} s", flush=True)
        return None
    tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] if done.returncode \
        else []
    print(f"  {what}: exit {done.returncode} in {time.perf_counter() - t0:.0f} s"
          + (f": {tail[0]}" if tail else ""), flush=True)
    return done if done.returncode == 0 else None


def design_of(plan: dict) -> str:
    """The plan's actors with each laned or batched element's lanes and batch."""
    lanes, batch = plan["mapping"].get("lanes", {}), plan["mapping"].get("batch", {})
    marks = {e: f"{e} x{lanes.get(e, 1)} b{batch.get(e, 1)}" for e in {*lanes, *batch}}
    actors = sorted(set(plan["mapping"]["assignment"].values()))
    return " + ".join(marks.get(a, a) for a in actors)


def run_front(model: str, args, out: Path) -> list[dict]:
    print(f"{model}:", flush=True)
    prof = out / f"{model}.profile.json"
    if not prof.exists() and step("profile", "profile", model, "-p", args.platform, "-o",
                                  str(prof), "--repeats", str(args.repeats)) is None:
        return []
    front = out / f"{model}.front"
    if step("map nsga2", "map", model, "--profile", str(prof), "-p", args.platform,
            "-s", "nsga2", "-O", f"generations={args.generations}", "--front-plans", str(front),
            "--pareto", str(out / f"{model}.pareto.csv"), "-o", str(out / f"{model}.plan.json"),
            "--seed", str(args.seed)) is None:
        return []
    rows = []
    for path in sorted(front.glob("*.plan.json"), key=lambda p: int(p.name.split("front")[1]
                                                                   .split(".")[0])):
        plan = json.loads(path.read_text())
        pred = plan["predicted"]
        frames = max(MIN_FRAMES, int(args.seconds * pred["throughput"]))
        done = step(f"run {path.name} ({frames} frames)", "run", str(path), "-n", str(frames),
                    "--warmup", str(max(20, frames // 10)), "--json",
                    timeout=120 + 10 * args.seconds)
        row = {"model": model, "plan": path.name, "design": design_of(plan),
               "predicted_fps": pred["throughput"], "predicted_latency_ms":
               pred["latency"] * 1e3, "predicted_j_per_frame": pred.get("energy_per_frame"),
               "predicted_method": pred.get("energy_method", "")}
        if done is not None:
            rep = json.loads(done.stdout)
            energy = rep.get("energy") or {}
            row.update(measured_fps=rep["throughput"],
                       measured_p50_ms=rep["latency"].get("p50", 0) * 1e3,
                       measured_j_per_frame=energy.get("joules_per_frame"),
                       measured_watts=energy.get("watts"),
                       measured_method=energy.get("method"),
                       counter_reliable=energy.get("measured"),
                       window_s=energy.get("window_s"),
                       max_abs_error=rep.get("max_abs_error"))
            if row["measured_j_per_frame"] and row["predicted_j_per_frame"]:
                row["energy_pred_over_meas"] = (row["predicted_j_per_frame"]
                                                / row["measured_j_per_frame"])
            row["fps_pred_over_meas"] = pred["throughput"] / rep["throughput"]
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    def f(x, fmt):
        return format(x, fmt) if isinstance(x, (int, float)) else "-"

    lines = ["| CNN | design | frames/s pred | frames/s meas | pred/meas | J/frame pred | "
             "J/frame meas | pred/meas | W meas | energy read by |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        method = r.get("measured_method") or {}
        lines.append(
            f"| {r['model']} | {r['design']} | {f(r['predicted_fps'], ',.0f')} | "
            f"{f(r.get('measured_fps'), ',.0f')} | {f(r.get('fps_pred_over_meas'), '.2f')} | "
            f"{f(r['predicted_j_per_frame'], '.4f')} | {f(r.get('measured_j_per_frame'), '.4f')}"
            f" | {f(r.get('energy_pred_over_meas'), '.2f')} | {f(r.get('measured_watts'), '.0f')}"
            f" | {'; '.join(f'{p}: {m}' for p, m in method.items()) or '-'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("-p", "--platform", default="auto")
    ap.add_argument("-o", "--output", default="fronts")
    ap.add_argument("--seconds", type=float, default=5.0, help="each run's length")
    ap.add_argument("--generations", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5, help="the profile's timed runs a layer")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for model in args.models:
        rows += run_front(model, args, out)
        (out / "fronts.json").write_text(json.dumps(rows, indent=1))
    text = table(rows)
    (out / "fronts.md").write_text(text + "\n")
    print(text)
    return 0 if rows and all("measured_fps" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
