#!/usr/bin/env bash
# A split plan on the GPU machine against the best unsplit plans of the same profile: hetflow
# profile, then map + run for the pipeline strategy, the gp strategy as it chooses (apply=auto)
# and the gp split forced (apply=always), outputs checked.
# Usage (repository root on the GPU machine, .whl/ holding the wheels the device lacks: onnx2torch, pydantic,
# pydantic_core, annotated_types, typing_inspection; for gp: cvxpy, clarabel, osqp, qdldl, cffi, pycparser):
#   CORES=11-15 bash scripts/gpu_split_check.sh MODEL ...
set -uo pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT"
RES=${RES:-/tmp/split-results}  # the device returns 8 files: the results travel as $OUT/all.tgz
mkdir -p "$RES"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HETFLOW_CACHE=/tmp/hfcache
H="taskset -c ${CORES:-11-15} python3 -m hetflow"
for m in "${@:-alexnet}"; do
  $H profile $m -o $RES/$m.profile.json 2>&1 | tail -2
  for s in "pipeline" "single" "gp -O apply=auto" "gp -O apply=always"; do
    tag=$(echo $s | tr -d ' =-' )
    $H map $m --profile $RES/$m.profile.json -s $s -o $RES/$m.$tag.plan.json 2>&1 | grep -E "predicted|split|error"
    $H run $RES/$m.$tag.plan.json --frames ${FRAMES:-600} --json > $RES/$m.$tag.run.json 2> $RES/$m.$tag.err
    echo "$m $s: rc=$? $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(round(r['throughput'],1), 'fps; predicted', round(r['predicted']['throughput'],1), '; checked', r['checked_frames'], 'max err', r['max_abs_error'])" $RES/$m.$tag.run.json 2>&1 | tail -1)"
  done
done
tar czf $OUT/all.tgz -C $RES . 2>/dev/null
