"""The engine's own ceiling from the command line (`hetflow.runtime.ceiling`): frames per
second through a chain of `--stages` no-op stages, or through the whole no-op model on
`--copies` members (a worker's own cost per frame). Usage: python -m
hetflow.bench.engine_ceiling [--stages N | --copies N] [--frames F]
"""
from __future__ import annotations

import argparse
import json
import time

from hetflow.runtime.ceiling import ceiling


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", type=int, default=3)
    ap.add_argument("--frames", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--copies", type=int, default=0, help="the whole model on N members instead")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    r = ceiling(a.stages, a.frames, a.repeats, a.copies)
    r["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(r))


if __name__ == "__main__":
    from .script import run_script

    run_script(main, "python -m hetflow.bench.engine_ceiling")
