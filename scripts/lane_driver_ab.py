"""Two versions of hetflow side by side: the GPU alone at k lanes run by the engine (a plan) and
by the baseline runner, for whichever hetflow comes first on PYTHONPATH; TAG names it in the
rows ($OUT/ab_TAG_TIME.json). Alternate versions on one machine, e.g. with an older commit
unpacked by `git archive OLD hetflow | tar -x -C /tmp/old`:
  for c in old new old new; do P=$PWD; [ $c = old ] && P=/tmp/old
    PYTHONPATH=$P TAG=$c python scripts/lane_driver_ab.py alexnet:16 squeezenet1_0:16; done"""
import json, os, sys, time
from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.mapping.mapping import Mapping
from hetflow.mapping.plan import Plan
from hetflow.model import resolve_model
from hetflow.platform import resolve_platform
from hetflow.platform.configs import finest_config
from hetflow.runtime.api import run_plan
from hetflow.runtime.baselines import measure_single
from hetflow.runtime.inputs import random_source

tag = os.environ["TAG"]
plat = resolve_platform("auto", check_devices=True)
finest = finest_config(plat)
gpu = next(e for e in finest.elements if e.kind == "gpu")
rows = []
for spec in sys.argv[1:]:
    model, k = spec.split(":"); k = int(k)
    graph = resolve_model(model, fuse=True)
    assignment = {l.name: gpu.name for l in graph.layers}
    app = cnn_to_csdf(graph, assignment, "paper")
    plan = Plan(graph.name, graph.model_hash, "", "ab", Mapping(assignment, "paper", lanes={gpu.name: k}),
                app, {gpu.name: gpu}, 2, {"throughput": 0.0}, "ab")
    src = random_source(graph)
    base = measure_single(graph, gpu, src, seconds=2.0, warmup=20, lanes=k)
    eng = run_plan(plan, graph, frames=int(base.throughput * 2) + 400, warmup=400, check="none")
    rows.append({"code": tag, "model": model, "lanes": k, "baseline_fps": round(base.throughput),
                 "engine_fps": round(eng.throughput), "engine_p99_ms": round(eng.latency["p99"] * 1e3, 2)})
    print(json.dumps(rows[-1]), flush=True)
with open(os.path.join(os.environ.get("OUT", "."), f"ab_{tag}_{time.time():.0f}.json"), "w") as f:
    json.dump(rows, f)
