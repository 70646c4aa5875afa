"""Where does a GPU's batch-1 rate move from one half second to the next? Pure torch, no hetflow:
per half-second window, (a) k CUDA-graph lanes of a torchvision model, a thread each with a host
sync per frame (../shared/anchors/gpu_lanes_probe.py's method), (b) the same k graphs launched
from one thread two rounds ahead; beside them the host's steal time (/proc/stat) and, in
$OUT/smi.csv, the GPU's clocks, power and throttle reasons every 250 ms.
Usage: WINDOWS=12 python scripts/lane_noise_probe.py alexnet:8 alexnet:24 squeezenet1_0:16"""
import json, os, subprocess, sys, threading, time
import torch, torchvision.models as tvm

torch.backends.cudnn.benchmark = True
OUT = os.environ.get("OUT", ".")
WIN = 0.5; N = int(os.environ.get("WINDOWS", "16"))

def cpu_times():
    f = open("/proc/stat").readline().split()[1:]
    v = list(map(int, f)); return sum(v), v[7], v[3]  # total, steal, idle

def lane(model, shape):
    s = torch.cuda.Stream(); x = torch.randn(shape, device="cuda")
    with torch.cuda.stream(s):
        for _ in range(3): model(x)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        model(x)
    hin = torch.zeros(shape, pin_memory=True)
    return s, x, g, hin

def threaded(lanes, dur):
    counts = [0] * len(lanes); stop = time.perf_counter() + dur
    def w(i):
        s, x, g, hin = lanes[i]
        while time.perf_counter() < stop:
            with torch.inference_mode(), torch.cuda.stream(s):
                x.copy_(hin, non_blocking=True); g.replay()
            s.synchronize(); counts[i] += 1
    th = [threading.Thread(target=w, args=(i,)) for i in range(len(lanes))]
    t0 = time.perf_counter(); [t.start() for t in th]; [t.join() for t in th]
    return sum(counts) / (time.perf_counter() - t0)

def enqueued(lanes, dur):
    n = 0; evs = []; t0 = time.perf_counter(); stop = t0 + dur
    while time.perf_counter() < stop:
        for s, x, g, hin in lanes:
            with torch.cuda.stream(s):
                x.copy_(hin, non_blocking=True); g.replay()
        e = torch.cuda.Event(); e.record(lanes[-1][0]); evs.append(e)
        if len(evs) > 2:  # at most two rounds queued
            evs.pop(0).synchronize()
        n += len(lanes)
    torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)

smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active",
                        "--format=csv,noheader", "-lms", "250"], stdout=open(os.path.join(OUT, "smi.csv"), "w"))
res = {"host": os.uname().nodename, "nproc": os.cpu_count()}
with torch.inference_mode():
    for spec in sys.argv[1:]:
        name, k = spec.split(":"); k = int(k)
        m = getattr(tvm, name)().eval().cuda()
        lanes = [lane(m, (1, 3, 224, 224)) for _ in range(k)]
        threaded(lanes, 1.0); enqueued(lanes, 0.5)
        rows = []
        for i in range(N):
            a0 = cpu_times(); t = time.time()
            r_thr = threaded(lanes, WIN)
            a1 = cpu_times()
            r_enq = enqueued(lanes, WIN)
            a2 = cpu_times()
            st = lambda p, q: round(100 * (q[1] - p[1]) / max(1, q[0] - p[0]), 2)
            rows.append({"t": round(t, 2), "threaded": round(r_thr), "enqueued": round(r_enq),
                         "steal_pct_thr": st(a0, a1), "steal_pct_enq": st(a1, a2)})
            print(spec, rows[-1], flush=True)
        res[spec] = rows
        del lanes, m; torch.cuda.empty_cache(); time.sleep(1)
smi.terminate()
json.dump(res, open(os.path.join(OUT, "noise.json"), "w"), indent=1)
