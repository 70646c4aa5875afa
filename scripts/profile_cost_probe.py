"""Where a bench's profile spends its time: `measure_profile` (what `hetflow bench` runs on a cold
cache) of each MODEL under cProfile; prints the phase seconds and the functions with the most
cumulative time, and writes MODEL.prof under $OUT (default ./out).
Usage: python scripts/profile_cost_probe.py MODEL ... [--repeats 5] [--top 30]
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time
from pathlib import Path

from hetflow.bench.core import measure_profile
from hetflow.model import resolve_model
from hetflow.platform import resolve_platform


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--repeats", type=int, default=5)  # what `bench --quick` uses
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    platform = resolve_platform(None, check_devices=True)
    for name in args.models:
        t0 = time.perf_counter()
        graph = resolve_model(name, fuse=True)
        print(f"{name}: model read in {time.perf_counter() - t0:.1f} s", flush=True)
        prof = cProfile.Profile()
        prof.enable()
        profile, seconds = measure_profile(graph, platform, args.repeats,
                                           lambda msg: print(f"{name}: {msg}", flush=True))
        prof.disable()
        prof.dump_stats(out / f"{name}.prof")
        print(f"{name}: profile {seconds:.1f} s: {profile.meta.get('phase_seconds')}")
        pstats.Stats(prof).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
