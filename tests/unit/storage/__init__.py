"""Unit tests of kaliper.storage."""
