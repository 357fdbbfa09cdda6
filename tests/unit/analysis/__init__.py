"""Unit tests of kaliper.analysis."""
