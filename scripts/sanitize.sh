#!/usr/bin/env bash
# pkit's kernels under compute-sanitizer's memcheck, racecheck and synccheck: the collectives and peer copies
# (scripts/sanitize_kernels.py, 2 GPUs) and the Hopper GEMM's GPU tests (1 GPU; not the ones that need kernels
# to run side by side, which the sanitizer serialises, nor the timeout and rate tests).
# Usage (repo root): scripts/sanitize.sh   → exit 0 when every tool reports 0 errors (API errors included)
# and every result is right; one log per workload and tool in $OUT (default ./out). With one GPU the 2-GPU
# workload is left out and says so.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD:${PYTHONPATH:-}
OUT=${OUT:-out}
mkdir -p "$OUT"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
declare -A workloads=(
  [gemm]="python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gemm.py -k 'not read_only_after and not peer_timeout and not gemm_rates'"
)
if [ "$gpus" -ge 2 ]; then
  workloads[collectives]="python3 scripts/sanitize_kernels.py"
else
  echo "collectives: left out, this machine has $gpus GPU(s) and the workload needs 2"
fi
status=0
for name in "${!workloads[@]}"; do
  for tool in memcheck racecheck synccheck; do
    log="$OUT/sanitize-$name-$tool.log"
    eval "compute-sanitizer --tool $tool --report-api-errors all --error-exitcode 97 ${workloads[$name]}" > "$log" 2>&1
    code=$?
    echo "$name $tool: exit $code; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)"
    [ "$code" -eq 0 ] || status=1
  done
done
exit $status
