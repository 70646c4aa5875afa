#!/usr/bin/env bash
# Do GPU lanes wait for the GIL in a GPU/CPU plan? Runs saved plans (from a bench's results.tgz)
# with Python's default 5 ms switch interval and shorter ones (HETFLOW_SWITCH_INTERVAL), each
# with a trace, on the GPU machine. Usage: bash scripts/gil_probe.sh RESULTS.tgz PLAN ...
# e.g. git show c5ab2fd:docs/results/lanes_h100/run5/results.tgz > /tmp/run5.tgz && bash scripts/gil_probe.sh /tmp/run5.tgz tiny_yolo_v2.pipeline
set -uo pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HETFLOW_CACHE=/tmp/hfcache
TGZ=$1; shift
PLANS=/tmp/plans; mkdir -p $PLANS; tar xzf "$TGZ" -C $PLANS --wildcards '*.plan.json'
for p in "$@"; do
  model=${p%%.*}
  for si in ${INTERVALS:-0 0.0005 0.0001}; do
    HETFLOW_SWITCH_INTERVAL=$si timeout 120 python3 -m hetflow run $PLANS/$p.plan.json --model $model \
      --frames ${FRAMES:-1500} --warmup 100 --json --trace "$OUT/$p.si$si.trace.json" > "$OUT/$p.si$si.json" 2> "$OUT/$p.si$si.err"
    echo "$p switch=$si rc=$? $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(round(r.get('throughput',0)), 'fps p99', r.get('latency_p99'))" "$OUT/$p.si$si.json" 2>&1 | tail -1)"
  done
done
