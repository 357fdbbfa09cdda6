"""A run's environment block (`kaliper.environment/v1`, `runs/<repetition>/environment.json`): what the
run saw of its neighbours, and whether it counts as `quiet` or `contended`.

Why a document per run beside the records, not a field in each record: the window, the node's CPU and the
calibration probe belong to the run (all its replicas share them), the executor or the reporter measures
them, not the replica, and records are written once by the replicas and never rewritten. Like resources.json
it is stored once (by the local executor; on a cluster from Prometheus, before the first report:
kaliper.execution.cluster_documents) and read back by every later report. Absent for runs made before it existed: such runs are `unknown`, and count as
quiet (reports of old experiments are unchanged).
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from kaliper.storage import Storage, layout

ENVIRONMENT_SCHEMA: Final = "kaliper.environment/v1"
Verdict = Literal["quiet", "contended", "unknown"]


class ProbeFigures(BaseModel):
    """The calibration kernel timed before and after the run, and this machine's history of it."""

    model_config = ConfigDict(extra="forbid")

    kernel: str = Field(description="exactly what was timed (the reference kernel, threads)")
    before_rate: float | None = None
    after_rate: float | None = None
    unit: str = "1/s"
    baseline_rate: float | None = Field(None, description="median of this hardware's earlier probes")
    baseline_n: int = 0
    ratio: float | None = Field(None, description="slowest of before/after divided by the baseline")
    baseline_low: float | None = Field(
        None,
        description="low end of this hardware's quiet probes (the lowest 2, or 5%, left out: ProbeSpread)",
    )
    baseline_high: float | None = Field(
        None,
        description="high end of this hardware's quiet probes (the highest 2, or 5%, left out)",
    )
    spread: float | None = Field(
        None,
        description="the quiet spread the probe was judged with (high / low; at least 1.5 when the "
        "history was too short to show it)",
    )
    spread_assumed: bool | None = Field(
        None, description="true when the history was too short and the spread was assumed"
    )


class EnvironmentDoc(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["kaliper.environment/v1"] = Field(ENVIRONMENT_SCHEMA, alias="schema")
    experiment: str
    trial: str
    repetition: int
    source: str = Field(description="who measured: `local` (this machine's /proc and cgroup), `prometheus`")
    verdict: Verdict
    reasons: list[str] = Field(default_factory=list, description="why contended, with the figures")
    notes: list[str] | None = Field(
        None,
        description="recorded, not counted against the run: the GPU's software power cap, CPU-probe "
        "findings on a run whose work is on the GPU (absent when none)",
    )
    signals: dict[str, Any] = Field(
        default_factory=dict,
        description="window_s, cores, steal_share, others_share, involuntary_ctx_switches, throttled_s, "
        "load_avg_1m, cpu_mhz, ... (kaliper.monitoring.interference.Signals.to_dict); `gpu`: the run's "
        "GPU signals (kaliper.monitoring.nvml GpuWindow.signals)",
    )
    probe: ProbeFigures | None = None
    thresholds: dict[str, Any] = Field(default_factory=dict, description="the thresholds applied")
    attempt: int = Field(0, description="0 for the run; n for its n-th re-run after a contended attempt")


def environment_document(doc: EnvironmentDoc) -> dict[str, Any]:
    return doc.model_dump(mode="json", by_alias=True, exclude_none=True)


def store_environment(storage: Storage, doc: EnvironmentDoc) -> None:
    """Stored once per run (never rewritten)."""
    storage.put_json(
        layout.environment_key(doc.experiment, doc.trial, doc.repetition), environment_document(doc)
    )


def load_environment(storage: Storage, key: str) -> EnvironmentDoc:
    """Rejects an unknown schema version with the message every versioned document gives."""
    from kaliper.results.documents import load_versioned

    return load_versioned(EnvironmentDoc, ENVIRONMENT_SCHEMA, storage.get(key), storage.location(key))
