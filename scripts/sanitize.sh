#!/usr/bin/env bash
# pkit's collectives and peer copies under compute-sanitizer's memcheck, racecheck and synccheck (2 GPUs).
# Usage (repo root): scripts/sanitize.sh   → exit 0 when every tool reports 0 errors (API errors included)
# and every result is right; one log per tool in $OUT (default ./out).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
OUT=${OUT:-out}
mkdir -p "$OUT"
status=0
for tool in memcheck racecheck synccheck; do
  compute-sanitizer --tool "$tool" --report-api-errors all --error-exitcode 97 \
    python3 scripts/sanitize_kernels.py > "$OUT/sanitize-$tool.log" 2>&1
  code=$?
  echo "$tool: exit $code; $(grep -E 'ERROR SUMMARY' "$OUT/sanitize-$tool.log" | tail -1)"
  [ "$code" -eq 0 ] || status=1
done
exit $status
