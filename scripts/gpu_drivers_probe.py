"""What the CPU copies beside a fast CNN's GPU cost it, and whether one driving thread is its
bottleneck: the parallel copies (`measure_parallel`, the GPU at LANES lanes) in variants
  cK   the GPU and K single-core CPU copies (c0: the GPU alone; c15: the parallel baseline on
       the 16-core machine);
  cKx2 the same with the GPU's lanes split over two driving threads, the second on the last
       CPU copy's core (that copy dropped);
  cKp  the GPU's copy in this process and K CPU copies each in a process of its own (an ONNX
       Runtime loop on its core, its own frames: no hand-off), so no CPU copy shares the GPU
       thread's interpreter: the most that CPU copies in processes could give beside the GPU.
Variants alternate within each round (ROUNDS rounds, SECONDS each run, the order reversed
every other round); medians of each variant's total and of its GPU share (frames/s). GPU
machine.
Usage: [VARIANTS="c0 c15 c15x2 c15p"] [ROUNDS=3] [SECONDS=1.5] [LANES=24]
       python scripts/gpu_drivers_probe.py MODEL ..."""
import dataclasses
import json
import multiprocessing
import os
import statistics
import sys
import time

ROUNDS = int(os.environ.get("ROUNDS", 3))
SECONDS = float(os.environ.get("SECONDS", 1.5))
LANES = int(os.environ.get("LANES", 24))


def copy_in_process(model: str, element, ready, go, stop, results) -> None:
    """A CPU copy in a process of its own: warm up, then run frames from `go` to `stop`, and
    put (element, frames, seconds)."""
    from hetflow.backends import pin_current_thread
    from hetflow.backends.reuse import runners_for_many
    from hetflow.model import resolve_model
    from hetflow.runtime.inputs import random_source

    graph = resolve_model(model, fuse=True)
    src = random_source(graph)
    pin_current_thread(element.cores)
    [[runner]] = runners_for_many(graph, [([l.name for l in graph.layers], element, 1, "whole")])
    for i in range(5):
        runner.run(src(i))
    ready.release()
    go.wait()
    t0, n = time.perf_counter(), 0
    while not stop.is_set():
        runner.run(src(n))
        n += 1
    results.put((element.name, n, time.perf_counter() - t0))


def measure(model: str, graph, src, members: list, lanes: dict, procs: list,
            gpus: set[str]) -> tuple[float, float, float]:
    """(total frames/s, the GPUs' share, p99 of the members run here): `measure_parallel` of
    `members` while the CPU copies of `procs` run, each in a process of its own."""
    from hetflow.runtime.baselines import measure_parallel

    ctx = multiprocessing.get_context("spawn")
    ready, go, stop, results = ctx.Semaphore(0), ctx.Event(), ctx.Event(), ctx.Queue()
    ps = [ctx.Process(target=copy_in_process, args=(model, e, ready, go, stop, results),
                      daemon=True) for e in procs]
    for p in ps:
        p.start()
    for _ in ps:
        if not ready.acquire(timeout=300):
            raise RuntimeError("a CPU copy's process did not start in 300 s")
    go.set()
    rep = measure_parallel(graph, members, src, warmup=5, seconds=SECONDS, lanes=lanes)
    stop.set()
    got = [results.get(timeout=60) for _ in ps]
    for p in ps:
        p.join(timeout=30)
    on_gpu = sum(x for e, x in rep.notes["per_element_fps"].items() if e in gpus)
    apart = sum(n / s for _, n, s in got if s > 0)
    return rep.throughput + apart, on_gpu, rep.latency["p99"]


def main() -> None:
    from hetflow.backends.reuse import reusing_runners
    from hetflow.bench.core import baseline_elements
    from hetflow.model import resolve_model
    from hetflow.platform import resolve_platform
    from hetflow.runtime.inputs import random_source

    plat = resolve_platform("auto", check_devices=True)
    _, els = baseline_elements(plat)  # the parallel copies' elements
    gpu = next(e for e in els if e.kind == "gpu")
    cpus = [e for e in els if e.kind == "cpu"]
    # the second driver of the same device, on the last CPU copy's core
    gpu_b = dataclasses.replace(gpu, name=f"{gpu.name}b", cores=cpus[-1].cores)
    half = LANES // 2

    def members_of(name: str) -> tuple[list, dict, list]:
        """(members run by `measure_parallel`, their lanes, CPU copies run as processes)."""
        if name.endswith("p"):
            return [gpu], {gpu.name: LANES}, cpus[:int(name[1:-1])]
        k, _, drivers = name[1:].partition("x")
        k = int(k)
        if drivers == "2":
            return ([*cpus[:min(k, len(cpus) - 1)], gpu, gpu_b],
                    {gpu.name: half, gpu_b.name: LANES - half}, [])
        return [*cpus[:k], gpu], {gpu.name: LANES}, []

    variants = {v: members_of(v) for v in
                os.environ.get("VARIANTS", "c0 c4 c8 c12 c15").split()}
    rows = []
    with reusing_runners():
        for model in sys.argv[1:]:
            graph = resolve_model(model, fuse=True)
            src = random_source(graph)
            runs: dict[str, list] = {v: [] for v in variants}
            for r in range(ROUNDS):
                for v in (list(variants) if r % 2 == 0 else list(reversed(variants))):
                    runs[v].append(measure(model, graph, src, *variants[v],
                                           {gpu.name, gpu_b.name}))
            for v, rs in runs.items():
                row = {"model": model, "variant": v, "lanes": LANES,
                       "fps": round(statistics.median(x[0] for x in rs)),
                       "gpu_fps": round(statistics.median(x[1] for x in rs)),
                       "p99_ms": round(statistics.median(x[2] for x in rs) * 1e3, 2),
                       "runs": [round(x[0]) for x in rs]}
                rows.append(row)
                print(json.dumps(row), flush=True)
            path = os.path.join(os.environ.get("OUT", "."), "gpu_drivers_probe.json")
            with open(path, "w") as f:
                json.dump({"command": "python scripts/gpu_drivers_probe.py "
                           + " ".join(sys.argv[1:]), "variants": list(variants),
                           "rounds": ROUNDS, "seconds": SECONDS, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
