"""Unit tests of kaliper.dashboards."""
