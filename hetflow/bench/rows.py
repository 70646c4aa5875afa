"""The rows of a bench's table and the lines said under it: one row per measured run, its
ratios against the baselines, and the head to head's line."""
from __future__ import annotations

from typing import Any, Callable

from hetflow.runtime.report import RunReport
from hetflow.plan.mapping import describe_design
from hetflow.rules import PILOT_CHALLENGE


def run_row(name: str, kind: str, r: RunReport, predicted: float | None = None,
         search_s: float | None = None, plan=None) -> dict[str, Any]:

    return {"name": name, "kind": kind, "throughput": r.throughput,
            "latency_p50": r.latency["p50"], "latency_p99": r.latency["p99"],
            "predicted_throughput": predicted, "search_seconds": search_s,
            "checked_frames": r.checked_frames, "max_abs_error": r.max_abs_error,
            "utilisation": r.utilisation,
            "stages": [a for a in plan.app.phases] if plan is not None else None,
            "design": (describe_design(plan.app.phases, plan.mapping.lanes, plan.mapping.batch) if plan is not None
                       else None),
            "lanes": ({e: k for e, k in plan.mapping.lanes.items() if k > 1} if plan is not None
                      else r.notes.get("lanes", {})),
            **({"interleave": plan.mapping.interleave}
               if plan is not None and plan.mapping.interleave else {}),
            **precision_fields(r, plan), **energy_fields(r)}


def energy_fields(r: RunReport) -> dict[str, Any]:
    """A run's energy over its steady window (`runtime.energy.run_energy`): joules per frame,
    mean watts, how each part was read ("gpu0: nvml; cpu: modelled (...)"), and whether every
    part was measured by a counter over a window long enough for it."""
    e = r.energy or {}
    return {"joules_per_frame": e.get("joules_per_frame"), "watts": e.get("watts"),
            "energy_method": "; ".join(f"{p}: {m}" for p, m in e.get("method", {}).items())
            or None, "energy_measured": bool(e.get("measured"))}


def precision_fields(r: RunReport, plan=None) -> dict[str, Any]:
    """A run's precisions (its plan's elements') and its deviation from the fp32 reference
    over the frames checked, worst per output (`RunReport.accuracy`)."""
    out: dict[str, Any] = {}
    if plan is not None:
        out["precisions"] = sorted({e.precision for e in plan.elements.values()})
    if r.accuracy:
        out["deviation"] = {
            "frames": r.accuracy["frames"], "inputs": r.accuracy.get("inputs"),
            "passed": r.accuracy["passed"], "tolerance": r.accuracy["tolerance"],
            "outputs": {o["name"]: {k: o[k] for k in ("rel_l2_worst", "max_abs_worst",
                                                      "top1_agreement")}
                        for o in r.accuracy["outputs"]}}
    return out


def compared(rows: list[dict], parallel: RunReport, single: RunReport) -> list[dict]:
    """The rows, infeasible plan kinds last, each run with its ratios against the parallel
    copies' and the peak single element's runs."""
    rows = ([r for r in rows if not r.get("infeasible")]
            + [r for r in rows if r.get("infeasible")])
    for row in rows:
        if not row.get("infeasible"):
            row["vs_parallel"] = row["throughput"] / parallel.throughput
            row["vs_single"] = row["throughput"] / single.throughput
            row["p99_vs_parallel"] = row["latency_p99"] / parallel.latency["p99"]
    return rows


def run_label(row: dict) -> str:
    """The plan kind whose run a plan row's figures are: its own, or that of the plan with the
    same mapping (`run_of`). Design strings name stages and lanes, not cut points, so two
    pipelines over the same elements share a design string but not a run."""
    return row.get("run_of") or row["name"].removeprefix("hetflow ")


def pilot_rate(row: dict) -> float | None:
    """The pilot rate (frames/s) of the design a plan row ran: measured before its run."""
    return next((t.get("pilot_throughput") for t in row.get("pilots") or ()
                 if t.get("chosen")), None)


def best_throughput_row(ran_plans: list[dict], log: Callable[[str], None] = lambda m: None
                        ) -> dict:
    """The plan a bench runs head to head as its best throughput plan: the throughput plans'
    fastest in the bench's one sample, unless the balanced plan's design piloted more than
    `rules.PILOT_CHALLENGE` above that plan's design. The balanced search looks at designs the
    throughput searches' predictions rank too low to pilot (a GPU beside a few multi-core CPU
    groups: fewer threads beside the GPU's driving thread), and a pilot is a measurement made
    before either plan ran; the bench's one sample is not the choice (the better of two noisy
    samples is biased high)."""

    throughput = [r for r in ran_plans if r["name"] != "hetflow balanced"]
    if not throughput:
        return ran_plans[0]
    best = max(throughput, key=lambda r: r["throughput"])
    bal = next((r for r in ran_plans if r["name"] == "hetflow balanced"), None)
    if bal is None or run_label(bal) == run_label(best):  # one mapping, one run: no choice
        return best
    ours, theirs = pilot_rate(best), pilot_rate(bal)
    if ours and theirs and theirs > PILOT_CHALLENGE.value * ours:
        log(f"the balanced plan's design piloted {theirs:.0f} frames/s, {theirs / ours:.2f}x "
            f"plan {best['name'].removeprefix('hetflow ')}'s: it runs head to head as the "
            "best throughput plan")
        return bal
    return best


def head_to_head_line(h: dict) -> str:
    """One line of a bench's head to head (`head_to_head.head_to_head` plus the plan kind; for
    the balanced plan, its rate floor and latency cap as shares of the copies')."""
    rounds = h.get("round_ratios") or []
    spread = (f"; rounds {min(rounds):.3f}-{max(rounds):.3f}" if len(rounds) > 1 else "")
    interval = h.get("round_ratio_interval")
    if interval:
        spread += (f"; the rounds' median {interval[2]:.0%} within "
                   f"{interval[0]:.3f}-{interval[1]:.3f}")
    line = (f"head to head, {h['repeats']} rounds alternately: hetflow {h['plan']} "
            f"{h['plan_fps']:.1f} frames/s, parallel copies {h['copies_fps']:.1f}: "
            f"{h['ratio']:.3f}x (medians{spread})")
    if h.get("p99_ratio") is not None:
        line += (f"; p99 {h['plan_p99'] * 1e3:.2f} ms against {h['copies_p99'] * 1e3:.2f}: "
                 f"{h['p99_ratio']:.2f}x")
    if h.get("run_of"):
        line += f" (the design of plan {h['run_of']})"
    if h.get("latency_cap") is not None:
        kept = balanced_pair_kept(h)
        line += (f"; floor {h['rate_floor']:.2f}x and cap {h['latency_cap']:.2f}x: "
                 + ("both kept" if kept else "not kept"))
    return line


def balanced_pair_kept(h: dict) -> bool:
    """Whether a balanced plan's head to head kept its floor (rate share of the copies') and
    its cap (p99 share of the copies'), by the medians."""
    return (h["ratio"] >= (h.get("rate_floor") or 0.0)
            and h.get("p99_ratio") is not None and h["p99_ratio"] <= h["latency_cap"])
