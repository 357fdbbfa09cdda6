"""Unit tests of kaliper.metrics."""
