"""End-to-end tests: real processes and services; every one is marked slow by tests/conftest.py."""
