"""The `kaliper` command line: `app.py` holds the app and the entry point; every other module is one
command group with a `register(app)` function."""

from kaliper.cli.app import app, main

__all__ = ["app", "main"]
