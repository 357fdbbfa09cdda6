"""Unit tests of kaliper.execution."""
