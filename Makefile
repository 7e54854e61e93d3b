# Two commands do all the set-up on a fresh machine:
#   make demo   render the template with default answers into build/demo and train it
#   make test   run the template's test suite (what CI runs)
#   make gpu-check   on a machine with CUDA: every rendering's CUDA tests and the GPU benchmark
#   make gpu-wheels  here, for a GPU machine without network: what its python3 lacks, in build/wheels
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test gpu-check gpu-wheels clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --group dev
	touch $@

demo: $(BIN)/.installed
	rm -rf build/demo
	$(BIN)/copier copy --defaults --vcs-ref HEAD --quiet $(CURDIR) build/demo  # absolute: build/demo can update
	cd build/demo && ../../$(BIN)/python train.py --output-dir runs --run-name demo

test: $(BIN)/.installed
	$(BIN)/python -m pytest

# A GPU node without network whose python3 has torch, torchvision, tensorboard, tqdm and pytest
# lacks these: `make gpu-wheels` saves them here for Pythons 3.11-3.13 (about 40 MB), and
# `make gpu-check WHEELS=build/wheels` there installs them offline into that python3, then checks
# with its torch. prefetch_generator is published as source only: built into a wheel here.
GPU_WHEELS := 'copier>=9.17.2' 'torchcodec>=0.16'
PLATFORMS := --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64

ifdef WHEELS
gpu-check:
	$(PYTHON) -m pip install --quiet --no-index --find-links $(WHEELS) prefetch_generator $(GPU_WHEELS)
	$(PYTHON) benchmarks/gpu_check.py
else
gpu-check: $(BIN)/.installed
	$(BIN)/python benchmarks/gpu_check.py
endif

gpu-wheels:  # downloads only: any pip will do, no .venv needed
	rm -rf build/wheels
	$(PYTHON) -m pip wheel --quiet --no-deps --wheel-dir build/wheels prefetch_generator
	for version in 3.11 3.12 3.13; do \
		$(PYTHON) -m pip download --quiet --dest build/wheels --only-binary=:all: \
			--python-version $$version $(PLATFORMS) $(GPU_WHEELS) || exit 1; \
	done

clean:
	rm -rf build $(VENV)
