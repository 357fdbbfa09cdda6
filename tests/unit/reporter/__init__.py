"""Unit tests of kaliper.reporter."""
