#!/usr/bin/env bash
# pkit's kernels under compute-sanitizer's memcheck, racecheck and synccheck: the collectives and peer copies
# (scripts/sanitize_kernels.py: every GPU, or ranks sharing the only one) and the Hopper GEMM's GPU tests (not the ones
# that need kernels to run side by side, nor the timeout and rate tests).
# racecheck runs kernels one at a time, so with one GPU it leaves the collectives out (their ranks' kernels wait
# for each other there) and says so.
# Usage (repo root): scripts/sanitize.sh   → exit 0 when every tool reports 0 errors (API errors included)
# and every result is right; one log per workload and tool in $OUT (default ./out).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
OUT=${OUT:-out}
mkdir -p "$OUT"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
declare -A workloads=(
  [collectives]="python3 scripts/sanitize_kernels.py"
  [gemm]="python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gemm.py -k 'not read_only_after and not peer_timeout and not gemm_rates and not plan_sweep'"
)
# racecheck tracks every shared-memory access and takes minutes over the GEMM's whole suite: under it every plan runs
# once, at the shape with edge tiles and split K, beside the split tails.
GEMM_RACECHECK="python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gemm.py -k '(matches_float32 and 1000) or every_tile_call_after_call'"
status=0
for name in collectives gemm; do
  for tool in memcheck racecheck synccheck; do
    if [ "$name" = collectives ] && [ "$tool" = racecheck ] && [ "$gpus" -lt 2 ]; then
      echo "$name $tool: left out, one GPU ($gpus): racecheck serialises the ranks that share it"
      continue
    fi
    log="$OUT/sanitize-$name-$tool.log"
    workload=${workloads[$name]}
    [ "$name" = gemm ] && [ "$tool" = racecheck ] && workload=$GEMM_RACECHECK
    eval "compute-sanitizer --tool $tool --report-api-errors all --error-exitcode 97 $workload" > "$log" 2>&1
    code=$?
    echo "$name $tool: exit $code; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)"
    [ "$code" -eq 0 ] || status=1
  done
done
exit $status
