"""Records of command workloads: ordinary `kaliper.result/v1` records whose figures match the log."""

from __future__ import annotations

import json
import re
import statistics
from datetime import UTC, datetime, timedelta

import pytest

from kaliper.metrics.extraction import Extraction, extract_text
from kaliper.metrics.rules import WALL_TIME, ExtractionRules, PatternMetric
from kaliper.metrics.sampling import SamplingRule
from kaliper.metrics.verdict import judge
from kaliper.results.protocol import RunIdentity
from kaliper.results.provenance import capture_hardware, capture_stack
from kaliper.results.record import Hardware, Metric, MetricSummary, ResultRecord, Stack, load_record
from kaliper.wrapper.command_record import WALL_TIME_FORMULA, command_record

PATTERN = r"([0-9.]+) images/sec"
RULES = ExtractionRules(
    metrics=(
        PatternMetric("images_per_s", PATTERN, "images/s", "higher", skip_first=2),
        PatternMetric("loss", r"loss ([0-9.]+)", "", "lower", replicas="all"),
    ),
    success_pattern="End of training",
)
THROUGHPUTS = [
    790.0,
    805.2,
    812.4,
    811.9,
    813.0,
    812.2,
    812.8,
    811.7,
    812.5,
    812.1,
    813.3,
    812.0,
    812.6,
    811.8,
]
LOG = "\n".join(
    [
        "Epoch 1/1",
        *(
            f"step {10 * (i + 1)} | loss {2.5 - i / 20:.2f} | {v} images/sec"
            for i, v in enumerate(THROUGHPUTS)
        ),
        "End of training",
    ]
)
STARTED = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture(scope="module")
def provenance() -> tuple[Stack, Hardware]:
    return capture_stack(None), capture_hardware()


def build(
    provenance: tuple[Stack, Hardware],
    extraction: Extraction,
    *,
    rules: ExtractionRules = RULES,
    primary: bool = True,
    rule: SamplingRule | None = None,
    failure: str | None = None,
    exit_code: int | None = 0,
) -> ResultRecord:
    rtype, index = ("Master", 0) if primary else ("Worker", 1)
    return command_record(
        RunIdentity("exp", "t000", 0, rtype, index, None, None),
        workload="train.py",
        framework="pytorch",
        framework_version="2.5.0",
        params={"batch_size": 32},
        rules=rules,
        extraction=extraction,
        primary=primary,
        wall_time_s=61.25 if primary else None,
        exit_code=exit_code,
        started=STARTED,
        finished=STARTED + timedelta(seconds=61.25),
        rule=rule or SamplingRule(min_samples=10, target_rel_ci=0.02),
        stack=provenance[0],
        hardware=provenance[1],
        recorded_by="workload",
        failure=failure,
    )


def test_the_reported_median_is_the_median_of_the_printed_values(provenance: tuple[Stack, Hardware]) -> None:
    extraction = extract_text(LOG, RULES, stream="stdout")
    assert judge(extraction, RULES, exit_code=0, replica="master-0", primary=True) is None
    record = build(provenance, extraction)
    loaded = load_record(record.to_json_bytes(), "x")
    assert loaded == record
    printed = [float(v) for v in re.findall(PATTERN, LOG)][2:]  # recomputed from the log, skip_first 2
    images = loaded.metrics["images_per_s"]
    assert images.summary.median == statistics.median(printed) and images.values == printed
    assert (
        images.warmup == [790.0, 805.2] and images.unit == "images/s" and images.direction == "more_is_better"
    )
    lines = LOG.splitlines()
    assert images.origin is not None and len(images.origin) == len(printed)
    for where, value in zip(images.origin, printed, strict=True):
        stream, number = where.split(":")
        assert stream == "stdout" and f"{value} images/sec" in lines[int(number) - 1]
    assert (
        loaded.metrics[WALL_TIME].values == [61.25] and loaded.metrics[WALL_TIME].formula == WALL_TIME_FORMULA
    )
    assert loaded.derived == {"exit_code": 0, "wall_time_s": 61.25}
    assert loaded.sampling is not None and loaded.sampling.stop_reason == "job_ended"
    assert loaded.sampling.converged and loaded.status == "ok" and loaded.sampling.warmup == 2
    assert loaded.workload.framework_version == "2.5.0" and loaded.params == {"batch_size": 32}


def test_the_rule_is_evaluated_not_enforced(provenance: tuple[Stack, Hardware]) -> None:
    extraction = extract_text(LOG, RULES)
    strict = SamplingRule(min_samples=50, target_rel_ci=0.02)
    record = build(provenance, extraction, rule=strict)
    assert record.status == "not_converged" and record.sampling is not None and not record.sampling.converged
    assert record.sampling.rel_ci_width is not None and len(record.metrics["images_per_s"].values) == 12


def test_a_failed_run_keeps_what_it_printed(provenance: tuple[Stack, Hardware]) -> None:
    text = "\n".join(LOG.splitlines()[:6]) + "\nRuntimeError: CUDA out of memory"
    extraction = extract_text(text, RULES, stream="stderr")
    reason = judge(extraction, RULES, exit_code=1, replica="master-0", primary=True)
    assert reason is not None and reason.startswith("command exited with status 1; last lines: ")
    record = load_record(build(provenance, extraction, failure=reason, exit_code=1).to_json_bytes(), "x")
    assert record.status == "failed" and record.error == reason
    assert record.metrics["images_per_s"].values == [812.4, 811.9, 813.0]
    assert record.derived["exit_code"] == 1


def test_worker_replica_has_no_wall_time_and_no_rule_metric(provenance: tuple[Stack, Hardware]) -> None:
    extraction = extract_text(LOG, RULES, primary=False)
    record = build(provenance, extraction, primary=False)
    assert set(record.metrics) == {"loss"}  # images_per_s is the primary's only; loss is every replica's
    assert record.sampling is None and record.status == "ok"
    assert record.ids.replica_type == "Worker" and record.derived == {"exit_code": 0, "wall_time_s": None}


def test_wall_time_only_and_mllog_constants(provenance: tuple[Stack, Hardware]) -> None:
    bare = ExtractionRules()
    record = build(provenance, extract_text("hello", bare), rules=bare)
    assert set(record.metrics) == {WALL_TIME} and record.sampling is None and record.status == "ok"
    mllog = ExtractionRules(format="mllog")
    lines = [
        ':::MLLOG {"namespace": "", "time_ms": 1000, "event_type": "POINT_IN_TIME", "key": "global_batch_size", "value": 256, "metadata": {"file": "t.py", "lineno": 1}}',
        ':::MLLOG {"namespace": "", "time_ms": 2000, "event_type": "INTERVAL_START", "key": "run_start", "value": null, "metadata": {"file": "t.py", "lineno": 2}}',
        ':::MLLOG {"namespace": "", "time_ms": 9000, "event_type": "POINT_IN_TIME", "key": "eval_accuracy", "value": 0.75, "metadata": {"file": "t.py", "lineno": 3, "epoch_num": 1}}',
        ':::MLLOG {"namespace": "", "time_ms": 12000, "event_type": "INTERVAL_END", "key": "run_stop", "value": null, "metadata": {"file": "t.py", "lineno": 4, "status": "success"}}',
    ]
    extraction = extract_text("\n".join(lines), mllog)
    built = build(provenance, extraction, rules=mllog)
    assert list(built.metrics) == ["time_to_train", "eval_accuracy", WALL_TIME]  # headline first
    record = load_record(built.to_json_bytes(), "x")
    assert record.metrics["time_to_train"].values == [10.0] and record.metrics["time_to_train"].origin == [
        "output:4"
    ]
    assert record.derived["mllog"] == {"global_batch_size": 256}
    assert record.sampling is None and record.status == "ok"


def test_jsonl_rule_metric_is_the_first_emitted_name(provenance: tuple[Stack, Hardware]) -> None:
    jsonl = ExtractionRules(format="jsonl")
    text = "\n".join(json.dumps({"name": "tokens_per_s", "value": 1000.0 + (i % 3)}) for i in range(30))
    record = build(provenance, extract_text(text, jsonl, stream="metrics"), rules=jsonl)
    assert record.sampling is not None and record.sampling.converged and record.status == "ok"
    assert record.metrics["tokens_per_s"].origin == [f"metrics:{n}" for n in range(1, 31)]


def test_built_in_metrics_serialise_as_before() -> None:
    """No warm-up values and no origin: the keys stay out of the JSON, so stored bytes do not change."""
    summary = MetricSummary(median=1.0, ci_low=None, ci_high=None, ci_level=0.95, n=1, rel_ci_width=None)
    metric = Metric(unit="s", direction="less_is_better", formula=None, values=[1.0], summary=summary)
    assert set(metric.model_dump(mode="json")) == {"unit", "direction", "formula", "values", "summary"}
    with_origin = metric.model_copy(update={"warmup": [2.0], "origin": ["stdout:3"]})
    assert with_origin.model_dump(mode="json")["origin"] == ["stdout:3"]
    assert Metric.model_validate(with_origin.model_dump(mode="json")) == with_origin
