"""Random sets of camera streams against the admission test, on the machine they run on.

`plan` draws random stream sets of the models whose profiles are in PROFILE_DIR (2 or 3
applications, each 1 to 127 streams (`--max-streams`) of one model at a period of 5 to 100 ms, the deadline 0.5
to 3 times the period) and asks `hetflow map-multi` whether each is admitted (with the
profile's worst measured times, `--time-stat max`, by default, and `--verify SECONDS`: a
trial run of each set the analysis admits, whose longest firings the analysis takes again),
until `--sets` are or `--tries` were drawn; it writes each admitted multi-plan and
`index.json` (every set drawn, with its specs and the admission's answer). With `--verify 0`
the search needs no GPU: it can run on another machine from the profiles and the platform
file of the one that will run the sets; a trial runs on the machine itself.

`run` runs every admitted set (or those `--only` names) with `hetflow run-multi` for at
least `--seconds`, and long enough that every stream gets 1,000 frames: with fewer, one late
frame is already more than 0.1% of a stream's deadlines and the run cannot tell a set that
keeps the limit from one that does not. It fails (exit 1) if any stream missed more than 0.1%
of its deadlines: the admission test is meant never to admit such a set.

    python scripts/stream_sets.py plan --profile-dir prof -p platform.yaml --sets 10 -o sets
    python scripts/stream_sets.py run sets --only 0,1,2
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from hetflow.io import write_json

PERIODS_MS = (5.0, 10.0, 20.0, 33.333, 50.0, 100.0)
DEADLINE_FACTORS = (0.5, 1.0, 2.0, 3.0)
MISS_LIMIT = 0.001  # the most of any stream's deadlines an admitted set may miss
STREAM_FRAMES = round(1 / MISS_LIMIT)  # a stream's frames for one miss to read as the limit


def draw_set(rng: np.random.Generator, models: list[str], max_streams: int = 128) -> list[str]:
    """One random set: `MODEL:period=..:deadline=..:streams=..:name=..` specs, each of 1 to
    `max_streams` - 1 streams (log-uniform; the default draws what the rounds before drew)."""
    specs = []
    for k in range(int(rng.integers(2, 4))):
        model = str(rng.choice(models))
        period = float(rng.choice(PERIODS_MS))
        deadline = period * float(rng.choice(DEADLINE_FACTORS))
        streams = int(np.exp(rng.uniform(0.0, np.log(max_streams))))
        specs.append(f"{model}:period={period:g}ms:deadline={deadline:g}ms:streams={streams}"
                     f":name=a{k}_{model}")
    return specs


def hetflow(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hetflow", *args], capture_output=True,
                          text=True)


def plan(args) -> int:
    if args.max_streams < 2:
        print(f"--max-streams {args.max_streams}: at least 2 (streams stay below it)",
              file=sys.stderr)
        return 2
    models = sorted({p.name.split(".")[0] for p in Path(args.profile_dir).glob("*.profile.json")})
    if not models:
        print(f"{args.profile_dir}: no *.profile.json", file=sys.stderr)
        return 2
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    index, admitted = [], 0
    for i in range(args.tries):
        if admitted >= args.sets:
            break
        specs = draw_set(rng, models, args.max_streams)
        path = out / f"set{i:02d}.json"
        r = hetflow("map-multi", *specs, "--profile-dir", args.profile_dir, "-p", args.platform,
                    "-o", str(path), "--seed", str(args.seed), "--time-stat", args.time_stat,
                    "--verify", str(args.verify))
        ok = r.returncode == 0 and "every deadline is met" in r.stdout
        if r.returncode not in (0, 2):
            print(r.stderr, file=sys.stderr)
            return 1
        if not ok:
            path.unlink(missing_ok=True)
        admitted += ok
        why = "" if ok else ([line for line in r.stdout.splitlines() if "MISSED" in line]
                             or r.stderr.strip().splitlines() or ["missed (predicted)"])[-1]
        index.append({"set": i, "specs": specs, "admitted": ok, "plan": path.name if ok else None,
                      "refused": why})
        print(f"set {i}: {'admitted' if ok else 'refused'}  {' '.join(specs)}", flush=True)
        # after every set: a search cut short keeps the sets it answered
        write_json(out / "index.json", index)
    print(f"{admitted} of {len(index)} sets admitted; wrote {out / 'index.json'}")
    return 0


def run(args) -> int:
    folder = Path(args.folder)
    index = json.loads((folder / "index.json").read_text())
    rows, worst = [], 0.0
    only = None if args.only is None else {int(x) for x in args.only.split(",")}
    for entry in [e for e in index if e["admitted"] and (only is None or e["set"] in only)]:
        mp = json.loads((folder / entry["plan"]).read_text())
        slowest = min(a.get("streams", 1) / a["period_s"] for a in mp["apps"])
        seconds = max(args.seconds, STREAM_FRAMES * max(a["period_s"] for a in mp["apps"]))
        frames = max(100, int(slowest * seconds))
        print(f"set {entry['set']}: about {seconds:.0f} s", flush=True)
        report = folder / f"run_{entry['plan']}"
        r = hetflow("run-multi", str(folder / entry["plan"]), "--frames", str(frames),
                    "-o", str(report))
        if r.returncode != 0:
            print(r.stdout[-2000:], r.stderr[-2000:], file=sys.stderr)
            rows.append({"set": entry["set"], "error": r.returncode})
            worst = 1.0
            continue
        data = json.loads(report.read_text())
        for app in data["apps"]:
            notes = app["notes"]
            streams = notes.get("streams") or [
                {"stream": app["name"], "frames": app["frames"], "missed": notes["missed"]}]
            for s in streams:
                share = s["missed"] / max(1, s["frames"])
                worst = max(worst, share)
                rows.append({"set": entry["set"], "app": app["name"], "stream": s["stream"],
                             "frames": s["frames"], "missed": s["missed"], "share": share,
                             "worst_s": s.get("max", app["latency"]["max"]),
                             "bound_s": app["predicted"]["response_worst"]})
        print(f"set {entry['set']}: " + ", ".join(
            f"{a['name']} {a['frames']} frames, {a['notes']['missed']} missed, worst "
            f"{1e3 * a['latency']['max']:.1f} ms (bound "
            f"{1e3 * a['predicted']['response_worst']:.1f})" for a in data["apps"]), flush=True)
    result = {"sets_run": len({r["set"] for r in rows}), "worst_stream_miss_share": worst,
              "limit": MISS_LIMIT, "rows": rows}
    if args.output:
        write_json(args.output, result)
    print(f"{result['sets_run']} admitted sets run; the worst stream missed "
          f"{100 * worst:.3f}% of its deadlines (limit {100 * MISS_LIMIT:.1f}%)")
    return 0 if worst <= MISS_LIMIT else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="draw random sets and admit them")
    p.add_argument("--profile-dir", required=True)
    p.add_argument("-p", "--platform", default="auto")
    p.add_argument("--sets", type=int, default=10, help="admitted sets wanted")
    p.add_argument("--tries", type=int, default=40, help="most sets drawn")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-streams", type=int, default=128,
                   help="streams of one application stay below it (fewer for a small machine: "
                        "on 2 cores, 128 admitted 3 sets in 80)")
    p.add_argument("--time-stat", default="max", choices=("median", "p90", "max"),
                   help="the profile's whole-model time the admission scales to (max: the "
                        "measured worst case, what a bound on the worst response needs)")
    p.add_argument("-o", "--output", default="stream_sets")
    p.add_argument("--verify", type=float, default=10.0, metavar="SECONDS",
                   help="map-multi's trial run of each set the analysis admits (0: none)")
    r = sub.add_parser("run", help="run every admitted set")
    r.add_argument("folder")
    r.add_argument("--seconds", type=float, default=10.0,
                   help="the shortest run (longer where a stream needs it for 1,000 frames)")
    r.add_argument("--only", help="comma-separated set numbers to run (default: every admitted)")
    r.add_argument("-o", "--output", help="results JSON")
    args = ap.parse_args()
    return plan(args) if args.cmd == "plan" else run(args)


if __name__ == "__main__":
    sys.exit(main())
