"""Unit tests, one folder per package of src/kaliper/ (tests/README.md)."""
