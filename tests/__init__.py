"""Kaliper's test suite: a package, so helpers import as `tests.support.*` (tests/README.md)."""
