"""The copies' own design (the whole model on every element of the finest configuration, the GPU
at 24 lanes) run by the engine against the parallel copies (`bench.head_to_head`, 3 rounds of
1.5 s), in variants that say where the engine's cost lies (GPU machine):
  all              every element (the design `hetflow bench` picks for most CNNs);
  cpus             the CPU elements only (no GPU);
  all_ctl_on_cpu0  every element, the engine's releasing thread on core 0 instead of the GPU's
                   driving core;
  all_ctl_unpinned every element, the releasing thread left to the kernel (not pinned);
  all_poll_20ms    every element, the releasing thread polling every 20 ms instead of 5;
  burn_U           every element, the copies' GPU thread spending U us more of Python a
                   frame (holding the interpreter): how much a driving thread's own cost
                   per frame moves the copies (the engine unchanged).
VARIANTS (space-separated) picks some; TAG names the code in the rows ($OUT/evc_TAG_PID.json).
Alternate two versions as scripts/lane_driver_ab.py does.
Usage: [VARIANTS="all cpus"] [TAG=new] python scripts/engine_vs_copies_variants.py MODEL ..."""
import json, os, sys
from engine_vs_copies import whole_model_plan
from hetflow.backends.reuse import reusing_runners
from hetflow.bench.core import baseline_elements
from hetflow.bench.head_to_head import head_to_head
from hetflow.model import resolve_model
from hetflow.platform import resolve_platform
from hetflow.runtime.inputs import random_source
import hetflow.backends as B, hetflow.backends.affinity as A
import hetflow.runtime.engine as E

plat = resolve_platform("auto", check_devices=True)
_, els_all = baseline_elements(plat)  # the parallel copies' elements
rows = []
orig_cc = A.control_cores
import time as _time
from hetflow.backends.inflight import InFlight
orig_submit = InFlight.submit


def burning(us: float):
    def submit(self, feeds, tag=None):
        if self.launches:
            end = _time.perf_counter() + us * 1e-6
            while _time.perf_counter() < end:
                pass
        return orig_submit(self, feeds, tag)
    return submit


with reusing_runners():
    for model in sys.argv[1:]:
        graph = resolve_model(model, fuse=True)
        src = random_source(graph)
        for variant in os.environ.get("VARIANTS", "all cpus all_ctl_on_cpu0 all_poll_20ms all").split():
            els = [e for e in els_all if variant != "cpus" or e.kind == "cpu"]
            lanes = {e.name: 24 for e in els if e.kind == "gpu"}
            B.control_cores = ((lambda elements: {0}) if variant == "all_ctl_on_cpu0" else
                               (lambda elements: set()) if variant == "all_ctl_unpinned" else
                               orig_cc)
            E.RELEASE_POLL = 0.02 if variant == "all_poll_20ms" else 0.005
            InFlight.submit = (burning(float(variant[5:])) if variant.startswith("burn_")
                               else orig_submit)
            plan = whole_model_plan(graph, plat.name, els, lanes)
            h = head_to_head(plan, graph, els, lanes, src, 3, 1.5, check="none")
            rows.append({"code": os.environ.get("TAG", ""), "model": model, "variant": variant, "engine": round(h["plan_fps"]),
                         "copies": round(h["copies_fps"]), "ratio": round(h["ratio"], 3),
                         "rounds": [round(x, 3) for x in h["round_ratios"]],
                         "engine_gpu": round(sum(v for e, v in h.get("plan_per_element_fps", {}).items() if e in lanes)),
                         "copies_gpu": round(sum(v for e, v in h.get("copies_per_element_fps", {}).items() if e in lanes))})
            print(json.dumps(rows[-1]), flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), f"evc_{os.environ.get('TAG', '')}_{os.getpid()}.json"), "w"), indent=1)
