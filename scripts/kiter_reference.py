"""Write random hetflow graphs as SDF3 files and record the period Kiter computes for each.

Usage: python scripts/kiter_reference.py KITER_BINARY [--kiter-version TEXT]
                                          [--out tests/dataflow/data/kiter]

The graphs come from seeded `random.Random` generators (tests/dataflow/strategies.py,
`random_csdf_graph`): static orders on shared processors, capacities, transfer times,
concurrency bounds (1, 2, 3, unbounded), multi-phase actors, channels with initial tokens,
single-phase replicas. Each is written with `write_sdf3` (the file `hetflow inspect --sdf3`
writes: `plain_graph` in the standard part, hetflow's own graph in its settings) and given to

    KITER_BINARY -f FILE -a KPeriodicThroughput

whose line "KPeriodic Period is P" (P in the file's time units, 6 decimals) is recorded in
OUT/reference.json with the file name, the seed, the time unit and the command.
tests/dataflow/test_kiter_reference.py then checks, without Kiter, that hetflow's analysis
finds the same periods. The script also prints hetflow's period beside Kiter's.

Kiter builds on Debian 12 with `apt-get install cmake g++ libboost-graph-dev
libboost-system-dev libboost-filesystem-dev libxml2-dev libglpk-dev zlib1g-dev`, then
`cmake SRC -DCMAKE_BUILD_TYPE=Release && make kiter` in a build folder (bin/kiter).

A graph on which Kiter and hetflow disagree goes to the list `kiter_differs` of
reference.json only if KITER_DIFFERS explains it (a limitation of Kiter, shown by the checks
described there); any other disagreement, or an error message from Kiter, makes the script
fail, as does an explained graph on which they now agree.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "dataflow")]  # this checkout's hetflow

from hetflow.dataflow.analysis import throughput_mcr  # noqa: E402
from hetflow.dataflow.sdf3 import plain_graph, write_sdf3  # noqa: E402
from hetflow.errors import InputError  # noqa: E402
from strategies import random_csdf_graph  # noqa: E402

ALGORITHM = "KPeriodicThroughput"
# (group, how many graphs, time unit of the file, random_csdf_graph options, actor counts)
GROUPS = [
    ("mapped", 12, 1.0, dict(), (2, 5)),
    ("unmapped_us", 8, 1e-6, dict(mapped=False, float_times=True), (2, 5)),
    ("replicas", 8, 1.0, dict(cycle_replicas=True), (2, 5)),
    ("large", 8, 1.0, dict(max_phases=4), (5, 7)),
]
# Graphs on which this Kiter's KPeriodicThroughput is known not to compute the self-timed
# period of the plain graph, with the reason found (the plain reader tests/dataflow/sdf3_oracle.py
# agrees with hetflow on both).
KITER_DIFFERS = {
    "replicas_2007": (
        "Kiter orders an actor's phases within one period of its K-periodic schedule, but the "
        "last phase of a period before the first of the next only for an actor with a one-token "
        "self-loop of rate 1 (its reentrancy loop; kperiodic.cpp, generateKperiodicSelfloop). "
        "a0 (phases 5, 0, 0 s, concurrency 2) is written with per-phase concurrency channels, "
        "and Kiter lets a phase-0 firing start before the phase-2 firing before it: 5 for 10. "
        "The plain reader without that in-order start finds 5 too; with all times x1000 and "
        "zeros made 1, Kiter still finds half the period (5002 for 10000)."),
    "replicas_2010": (
        "a cycle of zero duration: a2's phase 1 takes no time, as does its start actor "
        "a2__start, and the concurrency channel a2 -> a2__start closes the cycle; Kiter's "
        "cycle-ratio solver (Howard's iteration on tokens over durations) needs every cycle to "
        "take time. With all times x1000 and zeros made 1, Kiter agrees (7003 for 7003)."),
}
PERIOD = re.compile(r"KPeriodic Period is\s+(\S+)")
THROUGHPUT = re.compile(r"KPeriodic Throughput is\s+(\S+)")


def graphs():
    """(name, seed, time unit, graph) for every group: seeds counted up from the group's first,
    skipping graphs the export refuses (multi-phase cycle replicas) and graphs whose period is
    0 (no cycle limits them: Kiter's throughput would be infinite)."""
    for index, (group, count, unit, options, (lo, hi)) in enumerate(GROUPS):
        seed, made = 1000 * index, 0
        while made < count:
            seed += 1
            rng = random.Random(seed)
            g = random_csdf_graph(rng, rng.randint(lo, hi), **options)
            g.name = f"{group}_{seed}"
            try:
                if throughput_mcr(g).period <= 0:
                    continue
                plain_graph(g)
            except InputError:
                continue
            made += 1
            yield g.name, seed, unit, g


def run_kiter(kiter: str, path: Path) -> tuple[str, str]:
    out = subprocess.run([kiter, "-f", str(path), "-a", ALGORITHM], capture_output=True,
                         text=True, timeout=600)
    period, throughput = PERIOD.search(out.stdout), THROUGHPUT.search(out.stdout)
    if out.returncode != 0 or period is None or throughput is None or "[E]" in out.stdout + \
            out.stderr:
        raise RuntimeError(f"kiter failed on {path} (exit {out.returncode}):\n{out.stdout}\n"
                           f"{out.stderr}")
    return period.group(1), throughput.group(1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kiter", help="path to the kiter binary")
    ap.add_argument("--kiter-version", default="unknown",
                    help="Kiter's commit (recorded in reference.json)")
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "dataflow" / "data" / "kiter")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    records, differs, unexplained = [], [], 0
    for name, seed, unit, g in graphs():
        path = args.out / f"{name}.xml"
        write_sdf3(g, path, time_unit=unit)
        period, throughput = run_kiter(args.kiter, path)
        ours = throughput_mcr(g).period / unit
        same = abs(ours - float(period)) <= 5e-7 + 1e-9 * abs(ours)
        record = {"file": path.name, "seed": seed, "time_unit": unit,
                  "kiter_period": period, "kiter_throughput": throughput}
        note = ""
        if same and name not in KITER_DIFFERS:
            records.append(record)
        elif not same and name in KITER_DIFFERS:
            differs.append({**record, "reason": KITER_DIFFERS[name]})
            note = "differ (explained)"
        else:
            unexplained += 1
            note = "DIFFER" if not same else "AGREES, but listed in KITER_DIFFERS"
        print(f"{name:20s} kiter {period:>16s}  hetflow {ours:.6f}  {note}")
    reference = {
        "kiter": {"repository": "https://github.com/bbodin/kiter", "commit": args.kiter_version,
                  "command": f"kiter -f FILE -a {ALGORITHM}",
                  "output": "KPeriodic Period is P (file time units per graph iteration, "
                            "printed with 6 decimals)"},
        "regenerate": "python scripts/kiter_reference.py KITER_BINARY --kiter-version COMMIT",
        "graphs": records,
        "kiter_differs": differs,
    }
    (args.out / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    print(f"{len(records)} graphs agree, {len(differs)} differ as explained, "
          f"{unexplained} unexplained")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
