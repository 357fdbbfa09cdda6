"""A kubeconfig naming a loopback API server (the replayed or stateful stand-ins the tests start), so the
real `kubernetes` client inside Kaliper talks to it as it would to a cluster from outside one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def use_kubeconfig(tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kubeconfig naming the server at `url` with a token, as KUBECONFIG, outside any cluster."""
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "loop", "cluster": {"server": url}}],
        "users": [{"name": "me", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "loop", "context": {"cluster": "loop", "user": "me"}}],
        "current-context": "loop",
    }
    (tmp_path / "kubeconfig").write_text(json.dumps(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
