"""Unit tests of kaliper.exec."""
