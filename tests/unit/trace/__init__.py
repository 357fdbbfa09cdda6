"""Unit tests of kaliper.trace."""
