"""One exception tree for the whole project.

Each class carries the exit code the CLI uses, so a caller (a CI job, an Argo step) can tell bad input
(2) from a run that failed (1) without parsing messages. The CLI prints `error: <message>` and, only with
`--debug`, the traceback.
"""

from __future__ import annotations


class KaliperError(Exception):
    """Base class: anything Kaliper reports to a user as `error: ...`."""

    exit_code = 1


class InputError(KaliperError):
    """The user gave us something we cannot use; nothing was run or written."""

    exit_code = 2


class SpecError(InputError):
    """A benchmark spec is malformed; the message names the file and the field."""


class TemplateError(InputError):
    """A jsonnet job template failed to evaluate or rendered something that is not a valid job."""


class ParameterError(InputError):
    """A workload parameter is unknown or has the wrong type or value."""


class StorageURLError(InputError):
    """A storage URL is not one Kaliper can use."""


class SchemaVersionError(InputError):
    """A stored document has a schema version this Kaliper cannot read."""


class NotFoundError(InputError):
    """An experiment, trial or object asked for does not exist."""


class StorageError(KaliperError):
    """Reading or writing storage failed."""


class ObjectExistsError(StorageError):
    """An object already exists with different content; objects are never rewritten."""


class ExecutionError(KaliperError):
    """A job could not be started or supervised (not: a benchmark that ran and failed)."""


class RunsFailedError(KaliperError):
    """At least one run failed; the report was still written."""


class WorkloadError(KaliperError):
    """A workload could not measure (bad device, unsupported dtype, ...)."""


class ClusterError(KaliperError):
    """The Kubernetes API could not be reached or refused a request (kubeconfig, RBAC, missing CRDs)."""


class RegressionFound(KaliperError):
    """`kaliper compare` found at least one significant slowdown (verdict `slower`) of B against A."""

    exit_code = 3
