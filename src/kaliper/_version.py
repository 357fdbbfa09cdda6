"""The package version, in a module of its own so that any layer may read it without importing `kaliper`'s
lazy helpers (kaliper.emit, kaliper.trace_steps)."""

__version__ = "0.1.0"
