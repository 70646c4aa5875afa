#!/usr/bin/env bash
# Real exports on the GPU machine: torchvision models exported by torch.onnx.export (random
# weights, opset 17), each through `hetflow bench` (quick) on the GPU and a few CPU cores.
# Usage (repository root on the GPU machine, .whl/ holding the wheels the device lacks: onnx2torch, pydantic, pydantic_core, annotated_types, typing_inspection):
#   CORES=11-15 bash scripts/gpu_exports_bench.sh NAME ...
# CORES: the cores hetflow may use (taskset; the platform is detected from them, the GPU driven
# by one of them). Each model has its own report folder and time limit (MODEL_TIMEOUT).
set -uo pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HETFLOW_CACHE=/tmp/hfcache
python3 scripts/export_torchvision.py /tmp/exports "$@" 2>&1 | grep -v Warning | tee "$OUT/export.log"
for m in "$@"; do
  R=/tmp/report-$m; mkdir -p $R
  timeout ${MODEL_TIMEOUT:-150} taskset -c ${CORES:-11-15} python3 -m hetflow bench /tmp/exports/$m.onnx --quick \
    --strategies ${STRATEGIES:-single,pipeline} --pilots ${PILOTS:-2} --report $R > "$OUT/$m.log" 2>&1
  echo "$m: bench rc=$? $(tail -1 "$OUT/$m.log")"
  cp $R/bench.json "$OUT/$m.bench.json" 2>/dev/null
done
tar czf "$OUT/all.tgz" -C "$OUT" --exclude all.tgz . 2>/dev/null  # the device returns at most 8 files
