"""Markdown tables of a `hetflow bench --report DIR` run:
python scripts/results_table.py DIR/bench.json [--summary]
(--summary: one row per model against issue 5's targets)"""
import json
import sys


def main(path: str) -> None:
    d = json.load(open(path))
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


def summary(path: str, share: float = 0.5, floor: float = 0.9) -> None:
    d = json.load(open(path))
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


if __name__ == "__main__":
    if "--summary" in sys.argv:
        summary(next(a for a in sys.argv[1:] if a != "--summary"))
    else:
        main(sys.argv[1])
