"""Unit tests of kaliper.workflows."""
