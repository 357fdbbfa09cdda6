"""Unit tests of kaliper.stacks."""
