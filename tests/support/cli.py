"""The type of the `kaliper` fixture (tests/conftest.py): the real CLI in a fresh process."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

CliRunner = Callable[..., subprocess.CompletedProcess[str]]
