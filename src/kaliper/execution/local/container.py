"""What a pod's container becomes as a local process: its argv (with the trial's interpreter for `python`,
`kaliper` and `torchrun`), its declared env (field references from the pod's name, labels and annotations;
secrets from this environment), a stack's environment, and the executable a command names.

Split from kaliper.execution.local.job, which supervises the processes these describe.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

from kaliper.errors import ExecutionError
from kaliper.jobs.interpreter import with_python
from kaliper.jobs.kubeflow import RUNTIME_PATCH_MANAGER, TRAINER_NODE
from kaliper.jobs.operator_env import LOCAL_HOST

# torchrun is torch's console script for this module: run with the trial's interpreter, like `python`.
TORCHRUN = "torchrun"
TORCHRUN_MODULE = "torch.distributed.run"
_LABEL_PATH = re.compile(r"^metadata\.labels\['([^']+)'\]$")
_ANNOTATION_PATH = re.compile(r"^metadata\.annotations\['([^']+)'\]$")


def trainjob_pod_labels(manifest: dict[str, Any]) -> dict[str, str]:
    """The pod labels the TrainJob's runtime patches give its trainer nodes (Kaliper's entry last)."""
    labels: dict[str, str] = {}
    patches = manifest.get("spec", {}).get("runtimePatches", [])
    ordered = sorted(patches, key=lambda p: p.get("manager") == RUNTIME_PATCH_MANAGER)
    for patch in ordered:
        jobs = (
            patch.get("trainingRuntimeSpec", {}).get("template", {}).get("spec", {}).get("replicatedJobs", [])
        )
        for job in jobs:
            if job.get("name") == TRAINER_NODE:
                template = job.get("template", {}).get("spec", {}).get("template", {})
                labels.update(template.get("metadata", {}).get("labels", {}))
    return labels


def container_argv(container: dict[str, Any], python: str | None = None) -> list[str]:
    """Kubernetes semantics (command replaces the entrypoint, args follow), mapped to an interpreter.

    `kaliper` and `python` run with `python`: the trial's stack environment (kaliper.stacks), by default
    the interpreter running Kaliper, so a local run measures the environment the user is in; so does the
    `python` of a user's command under the wrapper (`kaliper exec ... -- python train.py`).
    """
    python = python or sys.executable
    argv = [*container.get("command", []), *container.get("args", [])]
    if not argv:
        raise ExecutionError(
            f"container {container.get('name')!r} has no command; the local executor needs one"
        )
    head = argv[0]
    if head == "kaliper":
        return [python, "-m", "kaliper", *_exec_python(argv[1:], python)]
    if head == TORCHRUN:  # torchrun [options] -m kaliper exec ... -- python train.py: the same mapping
        rest = argv[1:]
        if "-m" in rest:
            at = rest.index("-m") + 2
            if rest[at - 1 : at] == ["kaliper"]:
                rest = [*rest[:at], *_exec_python(rest[at:], python)]
        return [python, "-m", TORCHRUN_MODULE, *rest]
    return with_python(argv, python)


def _exec_python(rest: list[str], python: str) -> list[str]:
    """`exec ... -- python train.py`: the wrapped command's `python` is the trial's interpreter too."""
    if rest[:1] == ["exec"] and "--" in rest:
        at = rest.index("--") + 1
        return [*rest[:at], *with_python(rest[at:], python)]
    return rest


def stack_process_env(env: dict[str, str], python: str) -> dict[str, str]:
    """The environment of a replica run by a stack's virtual environment: that environment active
    (VIRTUAL_ENV, its bin first on PATH, so what the job starts by name is the stack's too), and nothing
    of the caller's Python search path (PYTHONPATH, PYTHONHOME) that could mix packages in."""
    venv = Path(python).parent.parent
    out = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYTHONHOME", "__PYVENV_LAUNCHER__")}
    out["VIRTUAL_ENV"] = str(venv)
    out["PATH"] = os.pathsep.join(filter(None, [str(venv / "bin"), env.get("PATH", "")]))
    return out


def _field_value(
    path: str, pod: str, namespace: str, labels: dict[str, str], annotations: dict[str, str]
) -> str:
    match = _LABEL_PATH.match(path)
    if match:
        return labels.get(match.group(1), "")
    match = _ANNOTATION_PATH.match(path)
    if match:
        return annotations.get(match.group(1), "")
    values = {
        "metadata.name": pod,
        "metadata.namespace": namespace,
        "spec.nodeName": socket.gethostname(),
        "status.podIP": LOCAL_HOST,
        "status.hostIP": LOCAL_HOST,
    }
    if path not in values:
        raise ExecutionError(f"env fieldRef {path!r} is not available to the local executor")
    return values[path]


def container_env(
    container: dict[str, Any],
    pod: str,
    namespace: str,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
) -> dict[str, str]:
    """The container's declared env; secret and config-map references come from this environment, field
    references from the pod's name, labels and annotations (a TrainJob node's rank is an annotation)."""
    env: dict[str, str] = {}
    for item in container.get("env", []):
        name = item["name"]
        if "value" in item:
            env[name] = str(item["value"])
            continue
        source = item.get("valueFrom", {})
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            env[name] = _field_value(path, pod, namespace, labels, annotations or {})
        elif name in os.environ:
            env[name] = os.environ[name]  # credentials: from the environment, never from the manifest
        elif any(isinstance(ref, dict) and ref.get("optional") for ref in source.values()):
            continue  # an optional secret or config-map key that is absent: Kubernetes leaves it unset
        else:
            raise ExecutionError(
                f"env {name} of container {container.get('name')!r} comes from {sorted(source)} on a cluster; "
                f"set {name} in the environment to run it locally"
            )
    return env


def resolve(command: str, path: str | None, cwd: Path | None) -> str | None:
    """The executable a container command names: absolute, relative to the working directory
    (`./train.sh`), or looked up on PATH."""
    if os.path.isabs(command):
        return command
    if os.sep in command:
        candidate = (cwd or Path.cwd()) / command
        return str(candidate) if os.access(candidate, os.X_OK) else None
    return shutil.which(command, path=path)
