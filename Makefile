# Two commands do all the set-up on a fresh machine:
#   make run    install Kaliper (with PyTorch) into .venv and run the quick-start benchmark to a report
#   make test   install the test tools too, then lint, type-check, build the docs and run the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SPEC ?= examples/quickstart.yaml
PYTEST_ARGS ?=
PYTEST_WORKERS ?= 2
# The documentation site (mkdocs.yml, docs/) is built here; `make docs` fails on any warning.
SITE_DIR ?= site

# Real services the tests talk to: Debian's prometheus + prometheus-pushgateway (promtool comes with
# prometheus), Debian's chromium (headless, loads report.html), Debian's slurm-wlm and munge (the tests
# start a one-node Slurm cluster of their own, as root: tests/support/slurm.py) and an S3-compatible
# server, moto_server, in its own venv (its botocore pins must not constrain Kaliper's dependencies).
# Without them the service tests skip, or fail under KALIPER_REQUIRE_SERVICES=1 (CI).
MOTO_VENV ?= .venv-moto
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test lint typecheck docs pytest bench clean services bytecode

# Bytecode is compiled when a package is installed (--compile-bytecode) and for src/, tests/ and
# benchmarks/ before a run (`bytecode`), never left to the first import: with PYTHONDONTWRITEBYTECODE set
# (CI machines, many containers) no process would ever write it, and every one would compile what it
# imports from source again: `import torch` 5.4 CPU-s instead of 2.6, the CLI's own imports 2.2 instead
# of 1.05; the suite starts some thousand such processes.
# The environments are installed by uv (pinned; the `stacks` extra needs it anyway): a minute where pip
# took four. uv reads no pip configuration, so pip's index settings (find-links, index URLs, CA bundle:
# where this machine's pip finds the CPU torch) are handed to it by the code that does so for stacks
# (kaliper.stacks.pipconfig, standard library only, run from src/ before anything is installed), with
# pip's pick-the-best-of-all-indexes strategy: uv installs what pip would.
UV_VERSION := 0.13.9
UV_INSTALL = $(shell PYTHONPATH=src $(BIN)/python -c 'import shlex; from kaliper.stacks.pipconfig import read_pip_config; c = read_pip_config(); print(*(["SSL_CERT_FILE=" + shlex.quote(c.cert)] if c.cert else []), "$(BIN)/uv pip install --quiet --compile-bytecode", shlex.join(c.args))')

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(BIN)/uv: | $(BIN)/python
	$(BIN)/python -m pip install --quiet 'uv==$(UV_VERSION)'

# torch is pinned (==2.13.0) in pyproject.toml so the installer takes the CPU build instead of CUDA wheels.
$(VENV)/.installed-all: pyproject.toml | $(BIN)/uv
	$(UV_INSTALL) --python $(BIN)/python -e '.[all]'
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed-all
	$(UV_INSTALL) --python $(BIN)/python -e '.[all,test]'
	touch $@

run: $(VENV)/.installed-all bytecode
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
	@if { command -v slurmctld || [ -x /usr/sbin/slurmctld ]; } >/dev/null && { command -v munged || [ -x /usr/sbin/munged ]; } >/dev/null; then :; \
	elif command -v apt-get >/dev/null; then \
		$(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge; \
	else echo "warning: no apt-get: install slurm-wlm and munge yourself, or the Slurm tests skip"; fi

# uv makes this venv (no pip in it: nothing installs into it but uv), in a second where `venv` takes ten.
$(MOTO_VENV)/bin/moto_server: | $(BIN)/uv
	$(BIN)/uv venv --quiet --python $(PYTHON) $(MOTO_VENV)
	$(UV_INSTALL) --python $(MOTO_VENV)/bin/python 'moto[server]==5.2.5'

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy

# --strict: a broken link or anchor, or a page missing from a file it names, fails the build.
docs: $(VENV)/.installed-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(SITE_DIR)

# The suite in two parts: most of it on PYTEST_WORKERS processes at once (pytest-xdist, a test file per
# worker, so a module's services start once), then the files that measure this machine (`serial`,
# tests/conftest.py) alone. Both parts always run; the target fails if either did (5: nothing selected).
# Only what changed since the last time is compiled again (a second when nothing did).
bytecode: $(VENV)/.installed-all
	$(BIN)/python -m compileall -q -j 0 src tests benchmarks >/dev/null

pytest: $(VENV)/.installed-test bytecode
	@status=0; \
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not serial" $(PYTEST_ARGS); rc=$$?; \
	[ $$rc -eq 0 ] || [ $$rc -eq 5 ] || status=$$rc; \
	$(BIN)/pytest -p no:xdist -m serial $(PYTEST_ARGS); rc=$$?; \
	[ $$rc -eq 0 ] || [ $$rc -eq 5 ] || status=$$rc; \
	exit $$status

bench: $(VENV)/.installed-all
	$(BIN)/python benchmarks/accuracy.py
	$(BIN)/python benchmarks/executor_overhead.py

clean:
	rm -rf $(VENV) $(MOTO_VENV) kaliper-results $(SITE_DIR) .pytest_cache .mypy_cache .ruff_cache
