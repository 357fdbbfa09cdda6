"""Unit tests of kaliper.steps."""
