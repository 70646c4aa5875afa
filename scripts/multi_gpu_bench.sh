#!/usr/bin/env bash
# Issue 7's measurement on the GPU machine: SqueezeNet, MobileNetV1 and MobileNetV2 (Kang et al.'s
# set) sharing one GPU and 16 cores, each at its own period, priorities in that order.
# Usage (repository root on the GPU machine, .whl/ holding the onnx2torch and pymoo wheels):
#   bash scripts/multi_gpu_bench.sh
# Periods are chosen from the profiles by scripts/multi_periods.py (the naive mapping must miss).
# Writes $OUT/multi.log and $OUT/multi.tgz (profiles, multi.json, naive.json, front.csv/png,
# *_report.json).
set -uo pipefail
OUT=${OUT:-./out}
D=${D:-/tmp/hetflow-multi}
mkdir -p "$D/prof" "$OUT"
[ -n "${SKIP_WHEELS:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HETFLOW_CACHE=/tmp/hfcache
export COLUMNS=160
FRAMES=${FRAMES:-10000}
NAIVE_FRAMES=${NAIVE_FRAMES:-2000}
TIME_STAT=${TIME_STAT:-max}
ENGINE=${ENGINE:-processes}
RUN_ARGS=${RUN_ARGS:-}  # more run-multi options for the hetflow plan's runs, e.g. --realtime
MODELS="squeezenet1_0 mobilenet_v1 mobilenet_v2"
run() { echo "+ $*"; "$@"; }
{
nvidia-smi -L
echo "cores: $(nproc); user: $(id -un); rt runtime: $(cat /proc/sys/kernel/sched_rt_runtime_us 2>/dev/null) us/s; isolated: $(cat /sys/devices/system/cpu/isolated 2>/dev/null)"
python3 -c "import os; os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10)); print('SCHED_FIFO allowed')" 2>&1 | tail -1
for m in $MODELS; do
  [ -f "$D/prof/$m.gpu.profile.json" ] || run python3 -m hetflow profile $m -o "$D/prof/$m.gpu.profile.json" --repeats ${REPEATS:-50} --json > "$D/prof/$m.summary.json" || exit 4
done
APPS=${APPS:-$(python3 scripts/multi_periods.py "$D/prof" $MODELS --time-stat $TIME_STAT)} || exit 5
echo "applications: $APPS"
run python3 -m hetflow map-multi $APPS --profile-dir "$D/prof" --time-stat $TIME_STAT -o "$D/multi.json" --pareto "$D/front.csv" || exit 6
run python3 -m hetflow map-multi $APPS --profile-dir "$D/prof" --time-stat $TIME_STAT -o "$D/naive.json" --naive || exit 7
run python3 -m hetflow run-multi "$D/naive.json" --frames $NAIVE_FRAMES --engine $ENGINE -o "$D/naive_report.json"
run python3 -m hetflow run-multi "$D/multi.json" --frames $FRAMES --engine $ENGINE $RUN_ARGS ${TRACE:+--trace "$D/trace.json"} -o "$D/multi_report.json"
# the same multi-plan again, as variants for comparison (COMPARE="threads realtime", or
# "" for none): threads/processes = that engine, realtime = the process engine under SCHED_FIFO
for v in ${COMPARE-threads}; do
  case $v in
    realtime) run python3 -m hetflow run-multi "$D/multi.json" --frames $FRAMES --engine processes --realtime $RUN_ARGS -o "$D/multi_report_$v.json" ;;
    *) run python3 -m hetflow run-multi "$D/multi.json" --frames $FRAMES --engine $v $RUN_ARGS -o "$D/multi_report_$v.json" ;;
  esac
done
} 2>&1 | tee "$D/multi.log"
rc=${PIPESTATUS[0]}
tar czf "$OUT/multi.tgz" -C "$(dirname "$D")" "$(basename "$D")"
cp "$D/multi.log" "$OUT/"
exit $rc
