"""A GPU's whole-model rate at many lane counts: the lanes' threads on its one driving core
(`1core`, as the profile and the engine drive them), split over two cores (`2cores`, from 8
lanes), and at 8 and 16 lanes beside single-thread copies busy on 14 CPU cores.
Usage (GPU machine): COUNTS=1,4,8,12,16,24 python scripts/lane_sweep.py MODEL ...
Writes $OUT/lane_sweep.json ({model: {"1core_kN" | "2cores_kN" | "busy14_kN": {"fps",
"host_us"[, "cpu_fps"]}}}); docs/results/lanes_h100/more_lanes."""
import json, os, sys, time
from dataclasses import replace
from hetflow.backends.reuse import reusing_runners, runners_for, runners_for_many, release
from hetflow.bench.core import baseline_elements
from hetflow.model import resolve_model
from hetflow.model.subnet import extract_subnet
from hetflow.platform import resolve_platform
from hetflow.profile.lanes import _time_lanes, running_beside
from hetflow.profile.measure import random_feeds

COUNTS = [int(x) for x in os.environ.get("COUNTS", "1,4,8,12,16,24").split(",")]
plat = resolve_platform("auto", check_devices=True)
_, els = baseline_elements(plat)  # the parallel copies' elements
gpu = next(e for e in els if e.kind == "gpu")
cpus = [e for e in els if e.kind == "cpu"]
print("gpu", gpu.name, gpu.cores, "cpus", len(cpus), flush=True)
out = {}
for model in sys.argv[1:]:
    graph = resolve_model(model, fuse=True)
    whole = [l.name for l in graph.layers]
    feeds = random_feeds(graph, extract_subnet(graph, whole).inputs)
    res = {}
    with reusing_runners():
        lanes = runners_for(graph, whole, gpu, max(COUNTS))
        g2 = replace(gpu, cores=(cpus[-1].cores[0],) + tuple(gpu.cores))
        for label, el in (("1core", gpu), ("2cores", g2)):
            for k in COUNTS:
                if label == "2cores" and k < 8: continue
                r = _time_lanes(f"{k}", lanes[:k], el, feeds, 1.0, 3) if label == "1core" else None
                if label == "2cores":
                    # _time_lanes pins every lane to element.cores[:1]; alternate instead
                    import time as T
                    from hetflow.backends import pin_current_thread
                    from hetflow.backends.together import run_together, frames_in_window
                    spans = [[] for _ in range(k)]
                    def prep(i):
                        pin_current_thread(el.cores[i % 2:i % 2 + 1])
                        for _ in range(3): lanes[i].run(feeds)
                    def step(i):
                        t0 = T.perf_counter(); lanes[i].run(feeds); spans[i].append((t0, T.perf_counter())); return True
                    w = run_together(f"{k}", [f"l{i}" for i in range(k)], prep, step, lambda e: e >= 1.0)
                    fps = sum(frames_in_window(s, w.start, w.stop) for s in spans) / (w.stop - w.start)
                    r = {"fps": fps, "host": {"median": float("nan")}}
                res[f"{label}_k{k}"] = {"fps": r["fps"], "host_us": 1e6 * r["host"]["median"]}
                print(model, label, k, "%.0f fps host %.1f us" % (r["fps"], 1e6 * r["host"]["median"]), flush=True)
        busy = [rs[0] for rs in runners_for_many(graph, [(whole, e, 1, None) for e in cpus[:14]])]
        with running_beside(busy, feeds) as count:
            for k in (8, 16):
                c0, t0 = count(), time.perf_counter()
                r = _time_lanes(f"{k} busy", lanes[:k], gpu, feeds, 1.5, 1)
                cfps = (count() - c0) / (time.perf_counter() - t0)
                res[f"busy14_k{k}"] = {"fps": r["fps"], "cpu_fps": cfps, "host_us": 1e6 * r["host"]["median"]}
                print(model, "beside 14 copies", k, "%.0f fps + cpu %.0f = %.0f" % (r["fps"], cfps, r["fps"] + cfps), flush=True)
        release([*lanes, *busy])
    out[model] = res
json.dump(out, open(os.environ.get("OUT", ".") + "/lane_sweep.json", "w"), indent=1)
