#!/usr/bin/env bash
# The GPU machine's benchmark (issues 5 and 6): hetflow bench over the papers' nine CNNs on one
# GPU + 16 CPU cores, plans against the baselines measured in the same run.
# Usage (repository root on the GPU machine, .whl/ holding the wheels the device lacks: onnx2torch, pydantic, pydantic_core, annotated_types, typing_inspection):
#   bash scripts/gpu_bench.sh [MODEL ...]
# Since the bench pilots three designs per plan kind (PILOTS=1: trust the prediction), the nine
# CNNs take longer than one 10-minute device call: run them in two calls, e.g.
#   bash scripts/gpu_bench.sh alexnet vgg19 googlenet tiny_yolo_v2 resnet18
#   bash scripts/gpu_bench.sh densenet121 emotion_ferplus mobilenet_v2 squeezenet1_0
# and read both halves as one table: python scripts/results_table.py A/bench.json B/bench.json
# Writes $OUT/bench.log, $OUT/bench.json and $OUT/results.tgz (plans, traces, report).
set -uo pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HETFLOW_CACHE=/tmp/hfcache
MODELS=${*:-alexnet vgg19 googlenet tiny_yolo_v2 resnet18 densenet121 emotion_ferplus mobilenet_v2 squeezenet1_0}
nvidia-smi -L
python3 -m hetflow platform detect 2>&1 | tail -20
REPORT=/tmp/hetflow-report
mkdir -p $REPORT
timeout ${BENCH_TIMEOUT:-540} python3 -m hetflow bench $MODELS --quick --strategies ${STRATEGIES:-single,pipeline} --pilots ${PILOTS:-3} --report $REPORT 2>&1 | tee "$OUT/bench.log"
rc=${PIPESTATUS[0]}
cp $REPORT/bench.json "$OUT/bench.json" 2>/dev/null
tar czf "$OUT/results.tgz" -C $REPORT . 2>/dev/null
echo "bench rc=$rc"
exit $rc
