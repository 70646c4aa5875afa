"""Markdown tables of `hetflow bench --report DIR` runs:
python scripts/results_table.py DIR/bench.json [MORE/bench.json ...] [--summary]
(several files: their models in one table, e.g. the two halves of the GPU bench;
--summary: one row per model against issue 5's targets; --lanes: one row per model against
the GPU-lanes targets: best plan x the parallel baseline and x the one-lane GPU, the balanced
plan, the head to heads' medians where the bench ran them (--head-to-head), and every plan's
a priori predicted / measured frames/s)"""
import argparse
import json


def load(paths: list[str]) -> dict:
    merged = {"models": [], "failed": {}}
    for path in paths:
        d = json.load(open(path))
        merged["models"] += d["models"]
        merged["failed"].update(d.get("failed", {}))
    return merged


def main(paths: list[str]) -> None:
    d = load(paths)
    print("| model | run | frames/s | p50 ms | p99 ms | x parallel | x peak single | p99 / parallel p99 | predicted fps | pred/meas |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for m in d["models"]:
        for r in m["rows"]:
            if r.get("infeasible"):
                print(f"| {m['model']} | {r['name']} | no plan meets the latency cap | | | | | | | |")
                continue
            pred = r.get("predicted_throughput")
            ratio = f"{pred / r['throughput']:.2f}" if pred else "-"
            pred_s = f"{pred:.0f}" if pred else "-"
            print(f"| {m['model']} | {r['name']} | {r['throughput']:.0f} | {r['latency_p50'] * 1e3:.2f} | "
                  f"{r['latency_p99'] * 1e3:.2f} | {r['vs_parallel']:.2f} | {r['vs_single']:.2f} | "
                  f"{r['p99_vs_parallel']:.2f} | {pred_s} | {ratio} |")
    for name, why in d.get("failed", {}).items():
        print(f"| {name} | failed: {why} | | | | | | | | |")


def summary(paths: list[str], share: float = 0.5, floor: float = 0.9) -> None:
    d = load(paths)
    print("| model | best plan x parallel | best plan x peak single | best plan with p99 <= "
          f"{share} x parallel's (x parallel >= {floor}) | predicted vs measured fps |")
    print("| --- | --- | --- | --- | --- |")
    for m in d["models"]:
        plans = [r for r in m["rows"] if r["kind"] == "plan" and not r.get("infeasible")]
        if not plans:
            print(f"| {m['model']} | no plan | | | |")
            continue
        best = max(plans, key=lambda r: r["throughput"])
        low = [r for r in plans if r["p99_vs_parallel"] <= share]
        ok = [r for r in low if r["vs_parallel"] >= floor]
        pick = max(ok or low or plans, key=lambda r: r["vs_parallel"]) if (ok or low) else None
        name = lambda r: r["name"].replace("hetflow ", "")  # noqa: E731
        bal = (f"{pick['vs_parallel']:.2f} ({name(pick)}, p99 {pick['p99_vs_parallel']:.2f})"
               if ok else "none" + (f" (best: {pick['vs_parallel']:.2f} at p99 "
                                    f"{pick['p99_vs_parallel']:.2f})" if pick else ""))
        errs = [abs(r["predicted_throughput"] / r["throughput"] - 1) for r in plans
                if r.get("predicted_throughput")]
        pred = f"{min(errs):.0%}-{max(errs):.0%} off" if errs else "-"
        print(f"| {m['model']} | {best['vs_parallel']:.2f} ({name(best)}) | "
              f"{best['vs_single']:.2f} | {bal} | {pred} |")


def lanes_summary(paths: list[str], share: float = 0.5, floor: float = 0.9, within: float = 0.15
                  ) -> None:
    d = load(paths)
    print("| model | GPU, 1 lane | parallel (GPU lanes + CPU copies) | best plan | x parallel | "
          "x 1-lane GPU | balanced: x parallel, p99 / parallel's | head to head: best plan "
          "[its rounds' median, 90%+]; balanced | predicted / measured, each plan |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    n_pred = n_ok = 0
    for m in d["models"]:
        rows = m["rows"]
        plans = [r for r in rows if r["kind"] == "plan" and not r.get("infeasible")]
        one = next((r for r in rows if r["name"].startswith("reference: single")), None)
        par = next(r for r in rows if r["name"].startswith("parallel copies"))
        best = max(plans, key=lambda r: r["throughput"])
        bal = next((r for r in plans if r["name"] == "hetflow balanced"), None)
        preds = []
        for r in plans:
            if r.get("predicted_throughput"):
                q = r["predicted_throughput"] / r["throughput"]
                n_pred += 1
                n_ok += abs(q - 1) <= within
                preds.append(f"{r['name'].replace('hetflow ', '')} {q:.2f}")
        bal_s = (f"{bal['vs_parallel']:.2f}, {bal['p99_vs_parallel']:.2f}"
                 + (" (met)" if bal["vs_parallel"] >= floor and bal["p99_vs_parallel"] <= share
                    else " (missed)")) if bal else "-"
        # a bench that skipped the one-lane reference rows (its budget) has no 1-lane figure
        print(f"| {m['model']} | {one['throughput']:.0f} | " if one else f"| {m['model']} | - | ",
              end="")
        print(f"{par['throughput']:.0f} | "
              f"{best['throughput']:.0f} ({best['name'].replace('hetflow ', '')}) | "
              f"{best['vs_parallel']:.2f} | "
              + (f"{best['throughput'] / one['throughput']:.1f}" if one else "-")
              + f" | {bal_s} | {head_to_heads(m['notes'])} | {', '.join(preds)} |")
    print(f"\npredictions within {within:.0%} of measured: {n_ok} of {n_pred} plans")


def head_to_heads(notes: dict) -> str:
    """The medians of a bench's head to heads: the best plan's x parallel, with the interval
    that holds its paired rounds' median (`head_to_head.median_interval`; naming the balanced
    plan where it ran as the best throughput plan); the balanced plan's x parallel and p99 /
    parallel's, met or missed (against the floor and cap it ran under)."""
    from hetflow.bench.core import balanced_pair_kept

    from hetflow.bench.head_to_head import median_interval

    h, b = notes.get("head_to_head"), notes.get("head_to_head_balanced")
    out = f"{h['ratio']:.3f}" if h else "-"
    interval = median_interval(h.get("round_ratios") or []) if h else None
    if interval:  # the paired rounds' median, 90% or more (93% at eight rounds)
        out += f" [{interval[0]:.2f}-{interval[1]:.2f}]"
    if h and h.get("plan") == "balanced":  # the balanced design piloted past the margin
        out += " (balanced)"
    if b and b.get("p99_ratio") is not None:
        met = balanced_pair_kept(b)
        out += f"; {b['ratio']:.2f}, {b['p99_ratio']:.2f} ({'met' if met else 'missed'})"
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="bench.json files")
    ap.add_argument("--summary", action="store_true", help="one row per model")
    ap.add_argument("--lanes", action="store_true", help="one row per model, GPU-lanes targets")
    args = ap.parse_args()
    (lanes_summary if args.lanes else summary if args.summary else main)(args.files)
