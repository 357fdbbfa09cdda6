# Two commands do all the set-up on a fresh machine:
#   make run    install Kaliper (with PyTorch) into .venv and run the quick-start benchmark to a report
#   make test   install the test tools too, then lint, type-check, build the docs and run the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SPEC ?= examples/quickstart.yaml
PYTEST_ARGS ?=
# The documentation site (mkdocs.yml, docs/) is built here; `make docs` fails on any warning.
SITE_DIR ?= site

# Real services the tests talk to: Debian's prometheus + prometheus-pushgateway (promtool comes with
# prometheus), Debian's chromium (headless, loads report.html) and an S3-compatible server, moto_server,
# in its own venv (its botocore pins must not constrain Kaliper's dependencies). Without them the
# service tests skip, or fail under KALIPER_REQUIRE_SERVICES=1 (CI).
MOTO_VENV ?= .venv-moto
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test lint typecheck docs pytest bench clean services

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

test: $(VENV)/.installed-test services lint typecheck docs pytest

services: $(MOTO_VENV)/bin/moto_server
	@if command -v prometheus >/dev/null && command -v prometheus-pushgateway >/dev/null && command -v promtool >/dev/null; then :; \
	elif command -v apt-get >/dev/null; then \
		$(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q --no-install-recommends prometheus prometheus-pushgateway; \
	else echo "warning: no apt-get: install prometheus and prometheus-pushgateway yourself, or their tests skip"; fi
	@if command -v chromium >/dev/null; then :; \
	elif command -v apt-get >/dev/null; then \
		$(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; \
	else echo "warning: no apt-get: install chromium yourself, or the report.html browser test skips"; fi

$(MOTO_VENV)/bin/moto_server:
	$(PYTHON) -m venv $(MOTO_VENV)
	$(MOTO_VENV)/bin/python -m pip install --quiet 'moto[server]==5.2.5'

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy

# --strict: a broken link or anchor, or a page missing from a file it names, fails the build.
docs: $(VENV)/.installed-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(SITE_DIR)

pytest: $(VENV)/.installed-test
	$(BIN)/pytest $(PYTEST_ARGS)

bench: $(VENV)/.installed-all
	$(BIN)/python benchmarks/accuracy.py
	$(BIN)/python benchmarks/executor_overhead.py

clean:
	rm -rf $(VENV) $(MOTO_VENV) kaliper-results $(SITE_DIR) .pytest_cache .mypy_cache .ruff_cache
