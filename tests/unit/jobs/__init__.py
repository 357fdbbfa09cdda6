"""Unit tests of kaliper.jobs."""
