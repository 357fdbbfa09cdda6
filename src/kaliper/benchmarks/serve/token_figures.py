"""Per-token figures of a streamed serving run, from the client's per-query timelines.

Every stamp is `perf_counter_ns` (CLOCK_MONOTONIC: LoadGen's clock too), taken by the client
(kaliper.benchmarks.serve.async_client) as each event arrives. Definitions, as the record states them:

- time to first token (TTFT): first token − issue. Under LoadGen the `ttft` metric is LoadGen's own
  (first token − scheduled issue, from its trace); ClosedLoop has no schedule, so its issue is the
  moment the user sends;
- time to second token (TT2T): second token − issue (the first inter-token gap on top of TTFT: a
  server that flushes its first token early and then stalls shows here);
- inter-token latency (ITL): every gap between two consecutive tokens of one answer; the run's
  p50/p90/p99 are over all gaps of all answers (not over per-answer means: one long answer weighs by its
  length), and the `itl` metric is each answer's mean gap;
- end-to-end latency: last byte − issue (LoadGen's `latency` metric under LoadGen);
- output tokens/s per user: an answer's output tokens ÷ its end-to-end latency;
- total output tokens/s: all measured answers' output tokens ÷ the window (first issue to last answer);
- request throughput: answers ÷ the same window.

Percentiles here are numpy's linear interpolation (LoadGen's own percentiles, in its summary and the
`latency_at_percentile_ms` figure, take the sorted value at floor(p·n)).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

PERCENTILES = (50, 90, 99)


class Timed(Protocol):
    """What these figures read of a query's timeline (kaliper.benchmarks.serve.async_client.Timeline)."""

    issued_ns: int
    queued_ns: int
    connect_ns: int
    sent_ns: int
    token_ns: list[int]
    done_ns: int
    output_tokens: int
    output_tokens_source: str
    error: str | None


def spread(values_ms: Sequence[float]) -> dict[str, float] | None:
    """count, mean and p50/p90/p99 of `values_ms` (ms, rounded to µs); None for no values."""
    if not values_ms:
        return None
    arr = np.asarray(values_ms, dtype=float)
    out = {"count": float(len(arr)), "mean": round(float(arr.mean()), 3)}
    for p, value in zip(PERCENTILES, np.percentile(arr, PERCENTILES), strict=True):
        out[f"p{p}"] = round(float(value), 3)
    return out


@dataclass(frozen=True)
class QueryFigures:
    """One value per measured query, in the order of the run's samples; None where undefined."""

    ttft_ms: list[float]
    tt2t_ms: list[float | None]
    itl_ms: list[float | None]  # the answer's mean gap
    e2e_ms: list[float]
    tokens_per_s_user: list[float]
    output_tokens: list[int]
    gaps_ms: list[float]  # every gap of every answer
    queued_ms: list[float]  # waiting for a free connection
    own_ms: list[float]  # issue → sent, less the connection wait and set-up: the client's own delay


def query_figures(timelines: Sequence[Timed]) -> QueryFigures:
    """The per-query figures of answered queries (a failed query has none: the caller counts it)."""
    ttft, tt2t, itl, e2e, per_user, tokens, gaps, queued, own = ([] for _ in range(9))
    for t in timelines:
        stamps = t.token_ns
        if t.error is not None or not stamps:
            continue
        ttft.append((stamps[0] - t.issued_ns) / 1e6)
        tt2t.append((stamps[1] - t.issued_ns) / 1e6 if len(stamps) > 1 else None)
        own_gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(stamps)]
        gaps.extend(own_gaps)
        itl.append(sum(own_gaps) / len(own_gaps) if own_gaps else None)
        latency_ms = (t.done_ns - t.issued_ns) / 1e6
        e2e.append(latency_ms)
        per_user.append(t.output_tokens / (latency_ms / 1e3) if latency_ms > 0 else 0.0)
        tokens.append(t.output_tokens)
        queued.append(t.queued_ns / 1e6)
        own.append(max(0, t.sent_ns - t.issued_ns - t.queued_ns - t.connect_ns) / 1e6)
    return QueryFigures(ttft, tt2t, itl, e2e, per_user, tokens, gaps, queued, own)


def window_s(timelines: Sequence[Timed]) -> float:
    """First issue to last answer, in seconds (0 for none)."""
    if not timelines:
        return 0.0
    return (max(t.done_ns for t in timelines) - min(t.issued_ns for t in timelines)) / 1e9


def run_figures(
    timelines: Sequence[Timed], figures: QueryFigures, asked: Sequence[int], ttft_ms: Sequence[float]
) -> dict[str, Any]:
    """The run's token figures for `derived`: `asked` is each answered query's output length asked for,
    `ttft_ms` the TTFT the record's metric holds (LoadGen's under LoadGen)."""
    window = window_s(timelines)
    answered = len(figures.e2e_ms)
    short = sum(1 for got, want in zip(figures.output_tokens, asked, strict=True) if got < want)
    long = sum(1 for got, want in zip(figures.output_tokens, asked, strict=True) if got > want)
    sources = sorted({t.output_tokens_source for t in timelines if t.error is None and t.token_ns})
    out: dict[str, Any] = {
        "ttft_ms": spread(ttft_ms),
        "tt2t_ms": spread([v for v in figures.tt2t_ms if v is not None]),
        "itl_ms": spread(figures.gaps_ms),
        "e2e_ms": spread(figures.e2e_ms),
        "output_tokens_per_s_per_user": spread(figures.tokens_per_s_user),
        "output_tokens": int(sum(figures.output_tokens)),
        "output_tokens_asked": int(sum(asked)),
        "output_tokens_counted_by": sources[0] if len(sources) == 1 else sources,
        "window_s": round(window, 6),
        "total_output_tokens_per_s": round(sum(figures.output_tokens) / window, 3) if window else None,
        "request_throughput_per_s": round(answered / window, 3) if window else None,
    }
    if short or long:
        out["output_length_note"] = (
            f"{short} of {answered} answers were shorter than the output length asked for (EOS before "
            f"max_tokens) and {long} longer: output lengths are not those asked"
        )
    return out
