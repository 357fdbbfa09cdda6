"""Unit tests of kaliper.monitoring."""
