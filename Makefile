# Two entry points, both self-contained on a machine with only Python:
#   make run   - create .venv, install npusim, run the default scenario
#   make test  - create .venv with dev extras, run the tests (all but the slow tier)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SCENARIO ?= workloads/scenarios/quickstart.yaml
PYTEST_ARGS ?=

.PHONY: run test validate bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

run: $(VENV)/.installed
	$(BIN)/npusim run $(SCENARIO) --out out/quickstart

test: $(VENV)/.installed
	$(BIN)/python -m pytest -n 2 -q $(PYTEST_ARGS)

validate: $(VENV)/.installed
	$(BIN)/npusim validate

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/bench_executor.py

clean:
	rm -rf $(VENV) out .pytest_cache
