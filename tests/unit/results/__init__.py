"""Unit tests of kaliper.results."""
