"""Unit tests of kaliper.configurator."""
