"""The repository's paths the tests read, in one place: test files move, these stay."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TESTS = REPO / "tests"
# Recorded inputs (GPU readings, upstream schemas with their provenance: tests/data/*/README.md).
DATA = TESTS / "data"
SCHEMAS = DATA / "schemas"
# Golden files the tests write under KALIPER_REGENERATE=1 and compare against otherwise.
GOLDEN = TESTS / "golden"
# Inputs of the unit tests: recorded Kubernetes objects (kube/), own-job specs and templates (own/).
FIXTURES = TESTS / "unit" / "fixtures"
