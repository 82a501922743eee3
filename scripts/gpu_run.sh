#!/usr/bin/env bash
# One batch on the GPU machine: `pkit info`, the GPU tests, then notebooks in measure mode.
# Usage (repo root, on the GPU machine): scripts/gpu_run.sh [NOTEBOOK ...]   (logs and results under $OUT)
# The machine has no registry: carry `.whl` (../shared/device/fetch-notebook-wheels.sh) for papermill.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-}
python3 -m pkit.cli info 2>&1 | tee "$OUT/info.log"
# before the notebook wheels go on the path: they break the image's torch import. test_notebooks needs
# nbformat, which the image lacks; the notebooks themselves run below.
python3 -m pytest -q -m "gpu or multigpu" --ignore=tests/test_notebooks.py ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/test-gpu.log"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/site/bin:$PATH
  python3 -m ipykernel install --user --name python3 >/dev/null
fi
for nb in "$@"; do  # one at a time: a failing notebook does not stop the others
  python3 -m pkit.cli figures --mode measure --only "$nb" 2>&1 | tee -a "$OUT/figures.log"
done
tar czf "$OUT/results.tgz" results figures build/notebooks 2>/dev/null
