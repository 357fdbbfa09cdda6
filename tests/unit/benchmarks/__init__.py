"""Unit tests of kaliper.benchmarks."""
