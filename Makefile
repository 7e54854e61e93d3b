# Two commands do all the set-up on a fresh machine:
#   make demo   render the template with default answers into build/demo and train it
#   make test   run the template's test suite (what CI runs)
#   make gpu-check   on a machine with CUDA: every rendering's CUDA tests and the GPU benchmark
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test gpu-check clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --group dev
	touch $@

demo: $(BIN)/.installed
	rm -rf build/demo
	$(BIN)/copier copy --defaults --vcs-ref HEAD --quiet . build/demo
	cd build/demo && ../../$(BIN)/python train.py --output-dir runs --run-name demo

test: $(BIN)/.installed
	$(BIN)/python -m pytest

gpu-check: $(BIN)/.installed
	$(BIN)/python benchmarks/gpu_check.py

clean:
	rm -rf build $(VENV)
