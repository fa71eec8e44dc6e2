#!/usr/bin/env bash
# One prepared call for the lent GPU box (H200; torch + CUDA, cupy, numpy 2, pandas, pyarrow,
# pytest; no Merlin, no cuDF, no project install). Run from the repository root:
#
#   OUT=/some/folder bash bench/gpu_check.sh
#
# Steps (each time-boxed; the whole run stays under ~8 minutes):
#   1. nvidia-smi
#   2. the CUDA-marked tests (only the files that hold them: the others import Merlin/Triton
#      packages this box lacks)
#   3. ncf synth --scale 1.0 (ML-20m-like, 20M ratings) and ncf etl --engine pandas
#   4. ncf.bench.train: batch 1M and 64k x fp32 / TF32 / AMP (throughput, peak GPU memory)
#   5. ncf.bench.inference: eager + TorchScript, batch 1024 and 1M, every precision the GPU has
#   6. ncf.bench.train: a timed 30-epoch run (AMP, batch 1M; train + evaluate every epoch)
#   7. ncf.bench.profile_step: torch.profiler on AMP steps at batch 1M (which kernels take the time)
#   8. ncf.bench.train: DLE's own step (fp32, TF32, AMP) beside ours (AMP) at batch 1M, on this GPU,
#      if time is left: DLE's published figures are from an A100, this compares on the same chip
#   9. ncf.bench.etl_kernels: the ETL's per-partition steps on cupy beside numpy, 20M ratings
# Every step writes into $OUT (JSON results, logs, steps.json); a summary table prints last.
# GPU_CHECK_DRY_RUN=1 prints each step's command ("DRY <args>", shell-quoted) instead of running
# it: tests/bench/test_gpu_check.py parses them all on CPU, so a typo cannot waste a device slot.
set -uo pipefail

OUT="${OUT:-/tmp/gpu_check}"
PY="${PYTHON:-python3}"
DATA="${GPU_CHECK_DATA:-/tmp/ml20m}"
BUDGET="${GPU_CHECK_BUDGET_S:-470}"   # seconds for everything; steps are skipped past it
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$(pwd)"
export PYTHONUNBUFFERED=1 NCF_NO_DLLOGGER=1
mkdir -p "$OUT" "$DATA"
START=$(date +%s)
STEPS="$OUT/steps.jsonl"
: >"$STEPS"

# step NAME TIMEOUT_S MIN_LEFT_S CMD...: run CMD under timeout, log to $OUT/NAME.log, record status.
step() {
    local name="$1" limit="$2" need="$3"
    shift 3
    local left=$((BUDGET - ($(date +%s) - START)))
    if [ "$left" -lt "$need" ]; then
        echo "{\"step\": \"$name\", \"status\": \"skipped\", \"left_s\": $left}" >>"$STEPS"
        echo "== $name: skipped (${left}s left of ${BUDGET}s)"
        return 1
    fi
    [ "$limit" -gt "$left" ] && limit="$left"
    if [ -n "${GPU_CHECK_DRY_RUN:-}" ]; then
        echo "DRY $(printf '%q ' "$@")"
        echo "{\"step\": \"$name\", \"status\": \"dry\"}" >>"$STEPS"
        return 0
    fi
    echo "== $name (timeout ${limit}s): $*"
    local t0 rc
    t0=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    echo "{\"step\": \"$name\", \"status\": $rc, \"seconds\": $(($(date +%s) - t0))}" >>"$STEPS"
    echo "== $name: exit $rc after $(($(date +%s) - t0))s"
    tail -n 4 "$OUT/$name.log"
    return "$rc"
}

step nvidia-smi 30 10 nvidia-smi
cp "$OUT/nvidia-smi.log" "$OUT/nvidia-smi.txt" 2>/dev/null

cuda_tests=$(grep -rlE "mark\.cuda" tests --include='*.py' | sort | tr '\n' ' ')
# shellcheck disable=SC2086  # a list of test files
step pytest-cuda 150 60 "$PY" -m pytest -m cuda -q -p no:cacheprovider -rs \
    --continue-on-collection-errors --junitxml="$OUT/pytest-cuda.xml" $cuda_tests

step synth 150 300 "$PY" -m ncf.cli synth --scale 1.0 --out "$DATA/ratings.csv" --force

etl_ok=1
if [ -f "$DATA/ratings.csv" ] || [ -n "${GPU_CHECK_DRY_RUN:-}" ]; then
    step etl 150 240 "$PY" -m ncf.cli etl --engine pandas --input "$DATA/ratings.csv" \
        --out "$DATA/etl" --holdout test --force && etl_ok=0
fi
# Without an ETL directory ncf.bench.train builds its own split of the same synthetic data.
if [ "$etl_ok" -eq 0 ]; then train_data=(--data "$DATA/etl"); else train_data=(--scale 1.0); fi

step train-points 150 150 "$PY" -m ncf.bench.train --device cuda "${train_data[@]}" \
    --batch-sizes 1048576 65536 --precisions fp32 tf32 amp --procs 1 --steps 5 --warmup 2 \
    --name train_gpu --results-dir "$OUT"

step inference 100 40 "$PY" -m ncf.bench.inference --device cuda --batch-sizes 1024 1048576 \
    --backends eager torchscript --max-seconds 1.0 --name inference_gpu --results-dir "$OUT"

# Last: it takes what time is left (its JSON is written only when all 30 epochs are done).
step train-30-epochs 200 100 "$PY" -m ncf.bench.train --device cuda "${train_data[@]}" \
    --batch-sizes 1048576 --precisions amp --procs 1 --steps 1 --warmup 1 --epochs-run 30 \
    --run-precision amp --name train_gpu_30ep --results-dir "$OUT"

step profile 60 40 "$PY" -m ncf.bench.profile_step --device cuda "${train_data[@]}" \
    --precision amp --batch 1048576 --warmup 3 --steps 3 --name profile_gpu --results-dir "$OUT"

step train-dle 90 45 "$PY" -m ncf.bench.train --device cuda "${train_data[@]}" \
    --batch-sizes 1048576 --precisions amp --dle-baseline --procs 1 --steps 5 --warmup 2 \
    --name train_gpu_dle --results-dir "$OUT"

# 9. The ETL's per-partition steps (prepare, finish) on cupy beside numpy: what dask-cuda workers
#    run in the partitioned ETL (this box has cupy, not cuDF/Dask/Merlin).
step etl-kernels 120 90 "$PY" -m ncf.bench.etl_kernels --scale 1.0 --devices numpy cupy \
    --repeats 2 --results-dir "$OUT"

echo "== total $(($(date +%s) - START))s; results in $OUT"
"$PY" - "$OUT" <<'EOF'
"""Summary: every step's status, then the key figures of each result file."""
import json
import sys
from pathlib import Path

out = Path(sys.argv[1])
print("\n| step | status | seconds |\n|---|---|---|")
for line in (out / "steps.jsonl").read_text().splitlines():
    s = json.loads(line)
    print(f"| {s['step']} | {s['status']} | {s.get('seconds', '')} |")
keys = ("op", "share_pct", "self_ms_per_step", "precision", "backend", "batch", "samples_per_s", "step_s", "peak_gpu_gib", "lat_mean_ms",
        "lat_p99_ms", "device", "prepare_s", "finish_s", "ratings_per_s")
for path in sorted(out.glob("*.json")):
    payload = json.loads(path.read_text())
    rows = payload.get("rows", [])
    print(f"\n{path.name}: {payload.get('machine', {}).get('gpu', '')} {payload.get('date', '')}")
    cols = [k for k in keys if any(k in r for r in rows)]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        cells = [f"{r[c]:,.4g}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in cols]
        print("| " + " | ".join(cells) + " |")
    if "timed_run" in payload:
        print("timed run:", json.dumps(payload["timed_run"], default=str)[:600])
EOF
