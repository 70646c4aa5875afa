#!/usr/bin/env bash
# hetflow bench of several CNNs on a GPU machine: every model's plans against the baselines
# measured in the same run, on the GPU and the CPU cores hetflow detects. Writes
# $OUT/bench.json (every row, and per model the basis of each prediction), $OUT/bench.txt (the
# printed tables) and $OUT/report/ (the HTML report and every plan that ran).
set -euo pipefail
usage="usage: scripts/gpu_bench.sh [-h] [MODEL|FILE.onnx ...]
  MODEL: zoo names or ONNX files (default: the papers' nine CNNs)
  env: OUT (default ./out), PYTHON (default python3), STRATEGIES (default single,pipeline),
       PILOTS (default 3), BUDGET (seconds for all models; default: --quick's 80 s a model),
       HEAD_TO_HEAD (rounds of the best plans against the parallel copies; default 0: none)"
case "${1:-}" in -h|--help) echo "$usage"; exit 0 ;; esac
OUT=${OUT:-./out}
PYTHON=${PYTHON:-python3}
MODELS=("$@")
if [ ${#MODELS[@]} -eq 0 ]; then
  MODELS=(alexnet vgg19 googlenet tiny_yolo_v2 resnet18 densenet121 emotion_ferplus mobilenet_v2
          squeezenet1_0)
fi
mkdir -p "$OUT/report"
nvidia-smi -L || echo "note: nvidia-smi not found; hetflow detects the elements itself"
"$PYTHON" -m hetflow platform detect
"$PYTHON" -m hetflow bench "${MODELS[@]}" --quick --strategies "${STRATEGIES:-single,pipeline}" \
  --pilots "${PILOTS:-3}" \
  --head-to-head "${HEAD_TO_HEAD:-0}" ${BUDGET:+--budget "$BUDGET"} --report "$OUT/report" | tee "$OUT/bench.txt"
cp "$OUT/report/bench.json" "$OUT/bench.json"
echo "wrote $OUT/bench.json and $OUT/bench.txt"
