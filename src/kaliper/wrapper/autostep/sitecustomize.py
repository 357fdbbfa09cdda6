"""Imported by Python at start-up in a command run by `kaliper trace record -- CMD` (this folder is first
on its PYTHONPATH): counts the script's steps at each optimizer.step(), so an unmodified script can be
traced.

It imports nothing heavy: without KALIPER_TRACE_DIR and KALIPER_TRACE_AUTO=1 it only hands over to the
next `sitecustomize` on the path (a virtualenv's or a distribution's, which this module would otherwise
hide). With them, it waits for torch.optim.optimizer to be imported by the script itself (importing
torch here would run before the script sets its threads or devices) and then registers a global
optimizer-step hook, kaliper.wrapper.trace_steps.optimizer_post_hook.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

_TARGET = "torch.optim.optimizer"
_HERE = os.path.dirname(os.path.abspath(__file__))


def _hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    try:
        from kaliper.wrapper.trace_steps import optimizer_post_hook
    except ImportError:  # an interpreter without Kaliper on its path: use the copy this file came from
        sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(_HERE))))
        from kaliper.wrapper.trace_steps import optimizer_post_hook
    optimizer_post_hook(optimizer, args, kwargs)


def _spec(
    finder: Any, fullname: str, path: Sequence[str] | None, target: ModuleType | None
) -> importlib.machinery.ModuleSpec | None:
    find = getattr(finder, "find_spec", None)
    found = find(fullname, path, target) if find is not None else None
    return found if isinstance(found, importlib.machinery.ModuleSpec) else None


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds torch.optim.optimizer through the other finders and registers the hook once it has run."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)  # once
        spec = next(filter(None, (_spec(f, fullname, path, target) for f in sys.meta_path)), None)
        if spec is None:
            return None
        loader: Any = spec.loader
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module: ModuleType) -> None:
            run(module)
            module.register_optimizer_step_post_hook(_hook)

        loader.exec_module = exec_module
        return spec


def _chain() -> None:
    """Import the sitecustomize this one hides, if there is one."""
    mine = sys.modules.get("sitecustomize")
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]
    sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ModuleNotFoundError as exc:
        if exc.name != "sitecustomize":
            raise
    finally:
        if mine is not None:
            sys.modules["sitecustomize"] = mine


_ON = bool(os.environ.get("KALIPER_TRACE_DIR")) and os.environ.get("KALIPER_TRACE_AUTO") == "1"
if _ON and _TARGET not in sys.modules:
    sys.meta_path.insert(0, _AfterImport())
_chain()
