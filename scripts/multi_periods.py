"""Choose periods for issue 7's measurement from the applications' profiles, and print the
`hetflow map-multi` application arguments.

Usage: python scripts/multi_periods.py PROFILE_DIR [--platform auto] MODEL ...
(MODEL in priority order, highest first; each needs PROFILE_DIR/<model>.*.profile.json)

The rule, so that the naive mapping (each application on its fastest element) misses and a
better one can meet every deadline:
- the first application's period is a share (0.9, then lower if needed) of its naive worst
  response: its own frame plus the longest frame of a lower-priority application that shares
  its fastest element and may block it (nothing is preempted);
- every other application's period is `--cpu-factor` (2) times its whole-model time on half
  of the CPU cores, so that it can also run beside the others on the CPUs.
The naive mapping is then analysed with these periods; a share is accepted once it misses.
"""
from __future__ import annotations

import argparse
import math
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile_dir")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--platform", default="auto")
    ap.add_argument("--time-stat", default="median")
    ap.add_argument("--cpu-factor", type=float, default=2.0)
    args = ap.parse_args(argv)

    from hetflow.multi.problem import load_multi_problem
    from hetflow.multi.search import naive_result
    from hetflow.multi.spec import parse_app_specs
    from hetflow.platform import resolve_platform

    plat = resolve_platform(args.platform)
    models = args.models

    def specs(periods: list[float]):
        return parse_app_specs([f"{m}:period={p * 1e3:.3f}ms:priority={i + 1}"
                                for i, (m, p) in enumerate(zip(models, periods))])

    # a first look with generous periods: each application's whole-model times per element
    mp = load_multi_problem(specs([1.0] * len(models)), plat, args.profile_dir,
                            time_stat=args.time_stat)
    first = naive_result(mp)
    alone = {a.name: first.naive.analysis[a.name].response_isolated for a in mp.apps}
    periods = [1.0]
    for a in mp.apps[1:]:
        cpu = [e for e in a.problem.elements if e.kind == "cpu"]
        most = max(len(e.cores) for e in cpu)
        half = [e for e in cpu if len(e.cores) <= math.ceil(most / 2)]
        t_half = min(a.problem.actor_time([l.name for l in a.graph.layers], e.name)
                     for e in half)
        periods.append(round(args.cpu_factor * t_half, 4))
    for share in (0.9, 0.8, 0.7, 0.6):
        naive = first.naive.analysis[mp.apps[0].name]
        # the naive worst with a generous period: own frame + blocking (+ interference)
        periods[0] = round(share * naive.response_worst, 5)
        res = naive_result(load_multi_problem(specs(periods), plat, args.profile_dir,
                                              time_stat=args.time_stat))
        if not res.naive.feasible and periods[0] > 1.1 * alone[mp.apps[0].name]:
            print(" ".join(f"{m}:period={p * 1e3:.3f}ms:priority={i + 1}"
                           for i, (m, p) in enumerate(zip(models, periods))))
            for a in res.naive.analysis.values():
                print(f"# naive: {a.name} worst {a.response_worst * 1e3:.3f} ms "
                      f"({'meets' if a.schedulable else 'misses'})", file=sys.stderr)
            return 0
    print("no periods found: the naive mapping meets every deadline with every share tried "
          "(the applications' fastest elements differ, so nothing blocks the first)",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
