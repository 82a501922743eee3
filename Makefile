# pkit: `make figures` regenerates every figure; `make test` runs the test suite. Both install first.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build on this workplace's disk; on a GPU box set TORCH_SPEC to the torch you want (or keep yours).
TORCH_SPEC ?= torch==2.13.0
MODE ?= auto
# On the GPU machine nothing can be installed: run with the image's python3 and the repo on PYTHONPATH.
RUN_PY := $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PY))

.PHONY: install figures test test-gpu lab clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[cuda,torch,dev]"
	touch $@

install: $(BIN)/.installed

figures: install
	$(BIN)/pkit figures --mode $(MODE)

test: install
	$(BIN)/python -m pytest -q

test-gpu:
	PYTHONPATH=$(CURDIR):$(PYTHONPATH) $(RUN_PY) -m pytest -q -m "gpu or multigpu"

lab: install
	$(BIN)/pip install -q -e ".[lab]"
	$(BIN)/jupyter lab notebooks/

clean:
	rm -rf build .pytest_cache
