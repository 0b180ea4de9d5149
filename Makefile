# recombine: `make demo` (set up + a quick reproduction), `make test` (set up + the test suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned for this machine (a CPU wheel is on disk); the package itself declares torch>=2.2.
TORCH_PIN ?= torch==2.13.0

.PHONY: demo test lint format bench install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet "$(TORCH_PIN)"
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/recombine reproduce ndr-ctl --quick --seeds 1 --jobs 2 --out runs/demo-ndr-ctl

test: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check src tests benchmarks

format: install
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

bench: install
	$(BIN)/python benchmarks/bench_geometric_attention.py --out benchmarks/results/geometric_attention.json

clean:
	rm -rf $(VENV) .pytest_cache
