#!/usr/bin/env bash
# Check and measure on this machine's GPUs in one batch: `pkit info`, the GPU tests (the `multigpu` ones need
# two GPUs with peer access), then each named notebook in measure mode, which rewrites results/<machine>/ and the
# machine's figures (figures/ for the machine of the committed figures, else figures/<machine>/). Logs and a
# tarball of results/, figures/ and the executed notebooks go to the folder OUT names (default out/); the exit
# status is the GPU tests'.
#
# Usage, from the repository root: scripts/gpu_run.sh [NOTEBOOK ...]    e.g. scripts/gpu_run.sh 00 04_collectives
# python3 needs pkit's dependencies (`make install`, then activate .venv; or an environment that ships them);
# pkit itself is imported from this checkout. CUDA_VISIBLE_DEVICES picks the GPUs; PYTEST_ARGS go to pytest.
# Records name the commit they were measured at: where the tree was copied without an up-to-date .git, pass it,
# e.g. PKIT_COMMIT=$(git rev-parse HEAD) taken where the copy came from (a clean tree only).
# Without a package index, put wheels of papermill, ipykernel and their dependencies in .whl/: they are
# installed under /tmp/site after the tests and used for the notebooks only.
set -uo pipefail
# pkit never uses NVLink multicast (NVLS); keep NCCL, torch symmetric memory and NVSHMEM off it as well.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-}
python3 -m pkit.cli info 2>&1 | tee "$OUT/info.log"
# Test modules that need Jupyter packages (nbformat) skip, saying so, where they are missing.
python3 -m pytest -q -m "gpu or multigpu" ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/test-gpu.log"
tests=${PIPESTATUS[0]}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/site/bin:$PATH
  python3 -m ipykernel install --user --name python3 >/dev/null
fi
for nb in "$@"; do  # one at a time: a failing notebook does not stop the others
  python3 -m pkit.cli figures --mode measure --only "$nb" 2>&1 | tee -a "$OUT/figures.log"
done
tar czf "$OUT/results.tgz" $(ls -d results figures build/notebooks 2>/dev/null)  # build/: only after notebooks ran
exit "$tests"  # the GPU tests' status
