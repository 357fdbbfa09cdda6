# Two commands do all the set-up on a fresh machine:
#   make run    install Kaliper (with PyTorch) into .venv and run the quick-start benchmark to a report
#   make test   install the test tools too, then lint, type-check and run the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SPEC ?= examples/quickstart.yaml
PYTEST_ARGS ?=

.PHONY: run test lint typecheck pytest bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch is pinned (==2.13.0) in pyproject.toml so pip takes the CPU build instead of CUDA wheels.
$(VENV)/.installed-all: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[all]'
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed-all
	$(BIN)/python -m pip install --quiet -e '.[all,test]'
	touch $@

run: $(VENV)/.installed-all
	$(BIN)/kaliper run $(SPEC)

test: $(VENV)/.installed-test lint typecheck pytest

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy

pytest: $(VENV)/.installed-test
	$(BIN)/pytest $(PYTEST_ARGS)

bench: $(VENV)/.installed-all
	$(BIN)/python benchmarks/accuracy.py
	$(BIN)/python benchmarks/executor_overhead.py

clean:
	rm -rf $(VENV) kaliper-results .pytest_cache .mypy_cache .ruff_cache
