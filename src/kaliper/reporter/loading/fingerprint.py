"""What makes two results comparable over time: the fingerprint of a trial's result series.

A fingerprint (12 hex digits) hashes the workload, the trial's parameters, the *declared* stack (its name,
image reference and requirements as the spec writes them) and the hardware class. Scheduled runs of one
spec on one node type share it even when what the image holds changes (a nightly tag, a new wheel), so
such a change shows as a step in one series, and `kaliper history` names the packages and image digest
that differ between its two sides; another node type or another declared stack is another series.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Protocol

from kaliper.results.documents import TrialDoc
from kaliper.results.record import Hardware, WorkloadInfo


class Measured(Protocol):
    """A result record, or the reporter's view of one (kaliper.results.views.RecordView)."""

    @property
    def workload(self) -> WorkloadInfo: ...

    @property
    def hardware(self) -> Hardware: ...


def hardware_class(record: Measured) -> dict[str, Any]:
    """What hardware must match for two results to be comparable (not the host name)."""
    hw = record.hardware
    return {
        "cpu_model": hw.cpu_model,
        "arch": hw.arch,
        "logical_cores": hw.logical_cores,
        # provenance.nvidia_smi_gpus names the model under "model"
        "gpus": sorted(str(g.get("model") or g.get("name") or "?") for g in hw.gpus),
    }


def hardware_label(record: Measured) -> str:
    """The hardware class in words, for messages (`kaliper compare` refusing a pair)."""
    hw = hardware_class(record)
    return f"{hw['cpu_model']} × {hw['logical_cores']} logical cores; GPUs: {hw['gpus'] or 'none'}"


def fingerprint(trial: TrialDoc, record: Measured) -> str:
    """12 hex digits over workload, the trial's parameters, its declared stack and the hardware class.

    The trial's parameters as planned: a record's params also hold values calibrated at run time (calls
    per sample), which differ from run to run of the same trial.
    """
    key = {
        "workload": record.workload.name,
        "params": trial.params,
        "stack": trial.stack.model_dump(mode="json"),
        "hardware": hardware_class(record),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]
