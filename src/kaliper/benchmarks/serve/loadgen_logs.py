"""Reading what LoadGen wrote: its verdict and figures (mlperf_log_detail.txt) and each sample's latency
(mlperf_log_trace.json).

Why the trace: LoadGen's summary holds only percentiles; the per-query latencies Kaliper's statistics
need appear only in its trace, as one `Sample` begin event per sample whose `complete_ns` is LoadGen's
own latency (completion minus *scheduled* time, the number its percentiles are taken over: checked by
tests/integration/test_serve_http.py against the summary). With token latencies on, the time to first token is a
`Token` event's `complete_ns` by sample_seq (SingleStream, MultiStream), or (Server, Offline) a
`Token_Latency` counter at the sample's timestamp: `issue_delay + issue_to_done`.
The trace is not strict JSON (LoadGen writes `""key""` in some events), so its lines are read with
regular expressions, not json.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_MLLOG = ":::MLLOG "
_SAMPLE = re.compile(
    r'"name":"Sample","cat":"default","ph":"b","pid":\d+,"id":\d+,"ts":([\d.]+),'
    r'"args":\{"sample_seq":(\d+),"query_seq":\d+,"sample_idx":\d+,"issue_start_ns":\d+,"complete_ns":(\d+)'
)
_TOKEN_EVENT = re.compile(
    r'"name":"Token","cat":"default","ph":"b","pid":\d+,"id":\d+,"ts":[\d.]+,'
    r'"args":\{"sample_seq":(\d+),"query_seq":\d+,"sample_idx":\d+,"issue_start_ns":\d+,"complete_ns":(\d+)'
)
_TOKEN = re.compile(
    r'"name":"Token_Latency","ph": ?"C","pid":\d+,"ts":([\d.]+),"args":\{ ?"issue_delay":(\d+),"issue_to_done":(\d+)'
)


@dataclass
class LoadGenLog:
    """LoadGen's result keys (`result_*`, `requested_*`, `effective_*`), its errors and warnings."""

    values: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.values.get("result_validity") == "VALID"

    def reasons(self) -> list[str]:
        """Why LoadGen found the result INVALID, in its own words (empty when VALID)."""
        if self.valid:
            return []
        checks = {
            "result_perf_constraints_met": "performance constraints not satisfied (latency bound)",
            "result_min_duration_met": "min duration not satisfied",
            "result_min_queries_met": "min queries not satisfied",
            "early_stopping_met": "early stopping not satisfied",
        }
        reasons = [text for key, text in checks.items() if self.values.get(key) is False]
        for key in (
            "result_invalid_reason",
            "early_stopping_result",
            "early_stopping_ttft_result",
            "early_stopping_tpot_result",
        ):
            text = " ".join(str(self.values.get(key) or "").split())
            if text:
                reasons.append(text)
        return reasons or [f"result_validity {self.values.get('result_validity')!r}"]


def read_detail(path: Path) -> LoadGenLog:
    log = LoadGenLog()
    for line in path.read_text(errors="replace").splitlines():
        if not line.startswith(_MLLOG):
            continue
        try:
            entry = json.loads(line[len(_MLLOG) :])
        except ValueError:
            continue
        key, value = str(entry.get("key")), entry.get("value")
        meta = entry.get("metadata") or {}
        if meta.get("is_error"):
            log.errors.append(f"{key}: {value}")
        elif meta.get("is_warning"):
            log.warnings.append(f"{key}: {value}")
        if key.startswith(("result_", "requested_", "effective_", "early_stopping")):
            log.values[key] = value
    return log


@dataclass(frozen=True)
class TraceSamples:
    """Per sample in sample_seq order: LoadGen's latency and, with token latencies, its TTFT (ns)."""

    latency_ns: list[int]
    ttft_ns: list[int] | None


def read_trace(path: Path) -> TraceSamples:
    text = path.read_text(errors="replace")
    samples = sorted((int(seq), float(ts), int(lat)) for ts, seq, lat in _SAMPLE.findall(text))
    events = {int(seq): int(ttft) for seq, ttft in _TOKEN_EVENT.findall(text)}
    if events:  # SingleStream/MultiStream: a `Token` event per sample, by sample_seq
        if all(seq in events for seq, _, _ in samples):
            return TraceSamples([lat for _, _, lat in samples], [events[seq] for seq, _, _ in samples])
        return TraceSamples([lat for _, _, lat in samples], None)
    by_ts: dict[float, list[int]] = {}
    for ts, delay, done in _TOKEN.findall(text):
        by_ts.setdefault(float(ts), []).append(int(delay) + int(done))
    ttft: list[int] | None = None
    if by_ts:
        # Samples of one query share a timestamp (Offline, MultiStream); their counters are taken in order.
        ttft = []
        for _, ts, _ in samples:
            queue = by_ts.get(ts)
            if not queue:
                ttft = None
                break
            ttft.append(queue.pop(0))
    return TraceSamples([lat for _, _, lat in samples], ttft)
