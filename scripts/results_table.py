"""Markdown table of a `hetflow bench --report DIR` run: python scripts/results_table.py DIR/bench.json"""
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


if __name__ == "__main__":
    main(sys.argv[1])
