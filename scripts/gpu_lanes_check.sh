#!/usr/bin/env bash
# GPU lanes on the GPU machine: how lanes are driven (block vs spin, alone and beside busy CPU
# copies), then `hetflow bench` of MODELS (default resnet18) with lanes, quick settings.
# Usage (repository root on the GPU machine, .whl/ holding the wheels the device lacks: onnx2torch, pydantic, pydantic_core, annotated_types, typing_inspection):
#   bash scripts/gpu_lanes_check.sh [MODEL ...]
# SYNC_MODELS: models of the sync A/B (default resnet18; empty: none); ENGINE_MODELS: models of
# scripts/engine_vs_copies.py (default none); BENCH_TIMEOUT: seconds for the bench; HEAD_TO_HEAD:
# the bench's --head-to-head N (default 0: none); BUDGET: the bench's --budget (seconds for all MODELS; default: --quick's 80 s a model).
set -uo pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HETFLOW_CACHE=/tmp/hfcache
nvidia-smi -L
if [ "${SYNC_MODELS-resnet18}" != "" ]; then
  timeout 200 python3 scripts/gpu_lanes_sync.py ${SYNC_MODELS-resnet18} 2>&1 | tee "$OUT/sync.log"
fi
if [ -n "${ENGINE_MODELS:-}" ]; then  # the engine against plain copies of the same design
  timeout ${ENGINE_TIMEOUT:-200} python3 scripts/engine_vs_copies.py $ENGINE_MODELS 2>&1 | tee "$OUT/engine.log"
fi
# the zoo's models are built (random weights) before the bench: the stand-in for the ONNX files
# a user hands the bench, whose time is the bench's own
python3 -c "import sys, time; t = time.perf_counter(); from hetflow.model import resolve_model
[resolve_model(m) for m in sys.argv[1:]]; print(f'models built in {time.perf_counter() - t:.1f} s')" ${*:-resnet18}
REPORT=/tmp/hetflow-report
mkdir -p $REPORT
timeout ${BENCH_TIMEOUT:-380} python3 -m hetflow bench ${*:-resnet18} --quick --strategies ${STRATEGIES:-single,pipeline} --pilots ${PILOTS:-3} --head-to-head ${HEAD_TO_HEAD:-0} ${BUDGET:+--budget $BUDGET} --report $REPORT 2>&1 | tee "$OUT/bench.log"
rc=${PIPESTATUS[0]}
cp $REPORT/bench.json "$OUT/bench.json" 2>/dev/null
tar czf "$OUT/results.tgz" -C $REPORT . 2>/dev/null
echo "bench rc=$rc"
exit $rc
