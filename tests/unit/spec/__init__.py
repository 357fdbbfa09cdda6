"""Unit tests of kaliper.spec."""
