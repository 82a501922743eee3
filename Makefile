# pkit's tasks, run from the repository root:
#   make install     a venv in .venv (VENV=...) with pkit editable, CuPy, torch, JupyterLab, ipywidgets, seaborn
#                    and the test tools; `source .venv/bin/activate` then puts `pkit` on the PATH
#   make test        the whole suite; tests marked gpu/multigpu skip where the GPUs they need are missing; on a
#                    machine without GPUs one pytest-xdist worker per CPU core, each pinned to its own core
#                    (tests/conftest.py); TEST_ARGS= (empty) runs it in one process
#   make test-gpu    only the GPU tests: `gpu` needs one CUDA GPU, `multigpu` two with peer access
#   make figures     every notebook through papermill; MODE=auto measures each study this machine has the GPUs
#                    for (rewriting results/<machine>/) and replays the rest (`pkit list studies` says which);
#                    figures go to figures/, or figures/<machine>/ for a machine other than the committed set's;
#                    then every figures/<machine>/ is replayed from results/<machine>/
#   make lab         JupyterLab on notebooks/ (LAB_ARGS="--no-browser --ip=127.0.0.1 --port=8888" adds options)
# CUDA_VISIBLE_DEVICES picks the GPUs. scripts/gpu_run.sh runs the GPU tests and chosen notebooks in one batch.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The torch pip installs when the venv has none; set it to the build for your CUDA driver, or install torch
# into the venv first and it is kept.
TORCH_SPEC ?= torch==2.13.0
MODE ?= auto
# Whole test files go to the workers (a file's module fixtures run once), the heavy ones first; a worker pinned
# to its own core times an evaluation's reference and candidates with no other worker's load beside them. With
# GPUs, `-n auto` starts no worker: the GPU tests share the GPUs and time them.
TEST_ARGS ?= -n auto --dist loadfile --no-loadscope-reorder
# test-gpu runs without installing: with the venv's python when there is one, else $(PY) (an environment that
# already has pkit's dependencies) with this checkout on PYTHONPATH.
RUN_PY := $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PY))
# pkit never uses NVLink multicast (NVLS); keep NCCL, torch symmetric memory and NVSHMEM off it as well.
NO_MULTICAST := NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

.PHONY: install figures test test-gpu lab clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[cuda,torch,dev]"
	touch $@

install: $(BIN)/.installed

# The machines with figures of their own (figures/<machine>/), each replayed after the committed set.
MACHINE_FIGURES = $(notdir $(patsubst %/,%,$(wildcard figures/*/)))

figures: install
	$(NO_MULTICAST) $(BIN)/pkit figures --mode $(MODE)
	for machine in $(MACHINE_FIGURES); do $(BIN)/pkit figures --mode replay --machine $$machine || exit 1; done

test: install
	$(BIN)/python -m pytest -q $(TEST_ARGS)

test-gpu:
	$(NO_MULTICAST) PYTHONPATH=$(CURDIR):$(PYTHONPATH) $(RUN_PY) -m pytest -q -m "gpu or multigpu"

# JupyterLab refuses to start as root (containers, cloud VMs) unless told --allow-root: passed only when uid is 0.
LAB_ROOT = $(if $(filter 0,$(shell id -u)),--allow-root)
LAB_ARGS ?=

lab: install
	$(BIN)/jupyter lab $(LAB_ROOT) --LabApp.extra_labextensions_path=pkit/lesson/labextension $(LAB_ARGS) notebooks/

clean:
	rm -rf build .pytest_cache
