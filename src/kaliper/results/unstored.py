"""Documents found but not stored before a report: what the command writing a report hands to the reporter.

The commands that write a report first store each run's resources and environment documents from
Prometheus (kaliper.execution.cluster_documents); what they could not store, with why, is given to the
report this way instead of the reporter asking Prometheus itself (it only reads documents).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kaliper.results.environment import EnvironmentDoc

RunId = tuple[str, int]  # (trial, repetition)


@dataclass(frozen=True, slots=True)
class Unstored:
    """What was found of runs whose documents were not stored: the resources block of a run without a
    time window, and the `unknown` environment document of a cluster run Prometheus could not be asked
    about (down, hung, the deadline spent), with why. Keyed by (trial, repetition)."""

    resources: Mapping[RunId, dict[str, Any]] = field(default_factory=dict)
    environment: Mapping[RunId, EnvironmentDoc] = field(default_factory=dict)


NOTHING: Final = Unstored()
