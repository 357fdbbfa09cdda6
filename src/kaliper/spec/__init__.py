"""The benchmark spec: what a user writes (`model`), how a file is read and checked (`loader`), the
service sections (`services`), durations and quantities (`units`), and error messages (`validation`).

Importing it stays light (no numpy, scipy or framework): `kaliper validate` and `--help` load it.
"""

from kaliper.spec.loader import (
    LoadedSpec,
    check_against_workload,
    load_spec,
    parse_spec_text,
    spec_from_text,
)
from kaliper.spec.model import (
    BenchmarkSpec,
    JobSpec,
    ResourcesSpec,
    SamplingSpec,
    StackSpec,
    Toleration,
    WorkflowSpec,
    WorkloadSpec,
)
from kaliper.spec.services import MonitoringSpec, ReportSpec, S3Spec

__all__ = [
    "BenchmarkSpec",
    "JobSpec",
    "LoadedSpec",
    "MonitoringSpec",
    "ReportSpec",
    "ResourcesSpec",
    "S3Spec",
    "SamplingSpec",
    "StackSpec",
    "Toleration",
    "WorkflowSpec",
    "WorkloadSpec",
    "check_against_workload",
    "load_spec",
    "parse_spec_text",
    "spec_from_text",
]
