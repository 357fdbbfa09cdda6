"""The per-token figures' definitions (kaliper.benchmarks.serve.token_figures) on timelines of known stamps."""

from __future__ import annotations

import pytest

from kaliper.benchmarks.serve.async_client import Timeline
from kaliper.benchmarks.serve.token_figures import query_figures, run_figures

MS = 1_000_000


def timeline(
    seq: int, issued: int, tokens: list[int], *, queued: int = 0, connect: int = 0, sent: int | None = None
) -> Timeline:
    t = Timeline(seq, seq, issued * MS)
    t.queued_ns, t.connect_ns = queued * MS, connect * MS
    t.sent_ns = (sent if sent is not None else issued + queued + connect) * MS
    t.token_ns = [s * MS for s in tokens]
    t.done_ns = t.token_ns[-1] + MS if tokens else t.sent_ns
    t.output_tokens = len(tokens)
    t.output_tokens_source = "usage"
    return t


def test_every_figure_follows_its_stated_definition() -> None:
    a = timeline(0, 0, [100, 110, 130, 160])  # gaps 10, 20, 30
    b = timeline(1, 50, [90, 95], queued=20, connect=5, sent=80)  # own delay: 80 - 50 - 20 - 5 = 5
    failed = timeline(2, 60, [])
    failed.error = "HTTP 503"
    f = query_figures([a, b, failed])
    assert f.ttft_ms == [100.0, 40.0]  # first token − issue; a failed query has no figures
    assert f.tt2t_ms == [110.0, 45.0]
    assert f.gaps_ms == [10.0, 20.0, 30.0, 5.0]  # every gap of every answer
    assert f.itl_ms == [20.0, 5.0]  # each answer's mean gap
    assert f.e2e_ms == [161.0, 46.0]  # last byte − issue
    assert f.tokens_per_s_user == pytest.approx([4 / 0.161, 2 / 0.046])
    assert f.queued_ms == [0.0, 20.0] and f.own_ms == [0.0, 5.0]
    doc = run_figures([a, b, failed], f, asked=[4, 3], ttft_ms=f.ttft_ms)
    assert doc["itl_ms"]["count"] == 4 and doc["itl_ms"]["p50"] == 15.0  # over the gaps, not the means
    assert doc["output_tokens"] == 6 and doc["output_tokens_asked"] == 7
    assert "1 of 2 answers were shorter" in doc["output_length_note"]
    assert doc["window_s"] == pytest.approx(0.161)  # first issue to last answer
    assert doc["request_throughput_per_s"] == pytest.approx(2 / 0.161, rel=1e-3)
    assert doc["output_tokens_counted_by"] == "usage"


def test_answers_as_long_as_asked_carry_no_note() -> None:
    a = timeline(0, 0, [10, 20])
    f = query_figures([a])
    assert "output_length_note" not in run_figures([a], f, asked=[2], ttft_ms=f.ttft_ms)
