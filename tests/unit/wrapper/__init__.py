"""Unit tests of kaliper.wrapper."""
