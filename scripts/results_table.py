"""Markdown tables of `hetflow bench --report DIR` runs:
python scripts/results_table.py DIR/bench.json [MORE/bench.json ...] [--summary]
(several files: their models in one table, e.g. the two halves of the GPU bench;
--summary: one row per model against issue 5's targets)"""
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


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="bench.json files")
    ap.add_argument("--summary", action="store_true", help="one row per model")
    args = ap.parse_args()
    (summary if args.summary else main)(args.files)
