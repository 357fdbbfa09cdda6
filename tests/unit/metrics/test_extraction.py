"""Samples read out of what real training jobs print: regex, MLPerf logging, kaliper.emit lines."""

from __future__ import annotations

import logging
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from kaliper.metrics.extraction import (
    MAX_LINE,
    TIME_TO_TRAIN,
    Extractor,
    compile_pattern,
    extract_text,
    guess_direction,
)
from kaliper.metrics.rules import EMIT_PREFIX, METRICS_FILE_ENV, ExtractionRules, PatternMetric
from kaliper.metrics.verdict import judge
from kaliper.wrapper.emit import emit

IMAGES = PatternMetric("images_per_s", r"([0-9.]+) images/sec", "images/s", "higher", skip_first=2)
LOSS = PatternMetric("loss", r"loss ([0-9.]+)", "", "lower")
TORCH_LOG = "\n".join(
    [
        "Epoch 1/1, 50 steps, batch size 32",
        *(
            f"step {i:>3} | loss {2.5 - i / 100:.2f} | {800 + i * 1.5:.1f} images/sec"
            for i in range(10, 60, 10)
        ),
        "End of training",
    ]
)


def test_pytorch_style_log_gives_every_match_with_warmup_and_positions() -> None:
    rules = ExtractionRules(metrics=(IMAGES, LOSS), success_pattern="End of training")
    extraction = extract_text(TORCH_LOG, rules, stream="stdout")
    images = extraction.metrics["images_per_s"]
    assert [s.value for s in images.warmup] == [815.0, 830.0]
    assert [s.value for s in images.timed] == [845.0, 860.0, 875.0]
    assert [(s.stream, s.line) for s in images.timed] == [("stdout", 4), ("stdout", 5), ("stdout", 6)]
    assert (
        images.formula
        == "regex '([0-9.]+) images/sec' (group 1) on the replica's output, first 2 matches warm-up"
    )
    assert images.direction == "more_is_better"
    assert [s.value for s in extraction.metrics["loss"].timed] == [2.4, 2.3, 2.2, 2.1, 2.0]
    assert extraction.metrics["loss"].direction == "less_is_better"
    assert extraction.success_seen and extraction.problems == [] and extraction.lines_seen == 7
    assert judge(extraction, rules, exit_code=0, replica="master-0", primary=True) is None


def test_tf_cnn_benchmarks_total_line_and_several_matches_per_line() -> None:
    log = (
        "Step\tImg/sec\ttotal_loss\n"
        "1\timages/sec: 120.1 +/- 0.0 (jitter = 0.0)\t7.7\n"
        "----------------------------------------------------------------\n"
        "total images/sec: 123.45\n"
    )
    total = PatternMetric("total", r"total images/sec: ([0-9.]+)", "images/s")
    extraction = extract_text(log, ExtractionRules(metrics=(total,)))
    assert [s.value for s in extraction.metrics["total"].timed] == [123.45]
    several = PatternMetric("lat", r"lat=([0-9.]+)ms", "ms", "lower")
    extraction = extract_text(
        "lat=1.5ms lat=2.5ms lat=3ms\nnone here\nlat=4ms", ExtractionRules(metrics=(several,))
    )
    assert [(s.value, s.line) for s in extraction.metrics["lat"].timed] == [
        (1.5, 1),
        (2.5, 1),
        (3.0, 1),
        (4.0, 3),
    ]


def test_streams_count_their_own_lines_and_replica_scope() -> None:
    every = PatternMetric("ips", r"ips=([0-9.]+)", replicas="all")
    rules = ExtractionRules(metrics=(every, LOSS))
    extractor = Extractor(rules, primary=False)
    for line, stream in [
        ("ips=1", "stdout"),
        ("warn", "stderr"),
        ("ips=2 loss 3", "stderr"),
        ("ips=3", "stdout"),
    ]:
        extractor.feed(line, stream)
    extraction = extractor.finish()
    assert [(s.value, s.stream, s.line) for s in extraction.metrics["ips"].timed] == [
        (1.0, "stdout", 1),
        (2.0, "stderr", 2),
        (3.0, "stdout", 2),
    ]
    assert "loss" not in extraction.metrics  # primary-only metric: not read on a worker, not required
    assert judge(extraction, rules, exit_code=0, replica="worker-0", primary=False) is None


def test_judge_pattern_never_matched_names_the_replica_and_the_last_lines() -> None:
    metric = PatternMetric("ips", "images/sec: ([0-9.]+)")
    rules = ExtractionRules(metrics=(metric,))
    extraction = extract_text("loading data\n" + "x" * 500 + "\ntraining done", rules)
    reason = judge(extraction, rules, exit_code=0, replica="master-0", primary=True)
    assert reason is not None
    assert reason.startswith(
        "pattern 'images/sec: ([0-9.]+)' never matched in master-0's output; last lines: \"loading data\", "
    )
    assert '"training done"' in reason and "x" * 200 + "…" in reason and "x" * 201 not in reason
    warm = ExtractionRules(metrics=(PatternMetric("ips", "images/sec: ([0-9.]+)", skip_first=3),))
    reason = judge(
        extract_text("images/sec: 1\nimages/sec: 2", warm), warm, exit_code=0, replica="m", primary=True
    )
    assert reason is not None and reason.startswith(
        "pattern 'images/sec: ([0-9.]+)' matched only 2 times in m's output, all warm-up (skip_first: 3)"
    )


@pytest.mark.parametrize("captured", ["abc", "nan", "inf", "1.2.3"])
def test_a_capture_that_is_not_a_finite_number_fails_the_run(captured: str) -> None:
    rules = ExtractionRules(metrics=(PatternMetric("v", r"value: (\S+)"),))
    extraction = extract_text(f"value: 1.5\nvalue: {captured}", rules, stream="stderr")
    assert [s.value for s in extraction.metrics["v"].timed] == [1.5]
    expected = f"metric 'v': stderr line 2 captured '{captured}', not a number"
    assert extraction.problems == [expected]
    assert judge(extraction, rules, exit_code=0, replica="master-0", primary=True) == expected
    only_bad = extract_text(f"value: {captured}", rules)
    assert judge(only_bad, rules, exit_code=0, replica="master-0", primary=True) == (
        f"metric 'v': output line 1 captured '{captured}', not a number"
    )


def test_success_and_failure_patterns_and_exit_codes() -> None:
    rules = ExtractionRules(success_pattern="^DONE$", failure_pattern=r"CUDA error|Traceback")
    bad = extract_text("step 1\nTraceback (most recent call last):\nDONE", rules, stream="stderr")
    assert bad.failure_match == ("stderr", 2, "Traceback (most recent call last):")
    assert judge(bad, rules, exit_code=0, replica="master-0", primary=True) == (
        "failure pattern 'CUDA error|Traceback' matched at stderr line 2: Traceback (most recent call last):"
    )
    missing = extract_text("step 1\nstep 2", rules)
    assert judge(missing, rules, exit_code=0, replica="worker-1", primary=False) == (
        'success pattern \'^DONE$\' never matched in worker-1\'s output; last lines: "step 1", "step 2"'
    )
    ok = extract_text("DONE", rules)
    assert judge(ok, rules, exit_code=None, replica="m", primary=True) is None
    assert (
        judge(ok, rules, exit_code=3, replica="m", primary=True)
        == 'command exited with status 3; last lines: "DONE"'
    )
    assert judge(ok, rules, exit_code=127, replica="m", primary=True).startswith("command not found")  # type: ignore[union-attr]
    assert judge(ok, rules, exit_code=-9, replica="m", primary=True).startswith(  # type: ignore[union-attr]
        "command was killed by SIGKILL (exit status -9)"
    )
    empty = extract_text("", rules)
    assert (
        judge(empty, rules, exit_code=1, replica="m", primary=True)
        == "command exited with status 1; no output"
    )


def test_compile_pattern_rejects_invalid_regex_and_regex_without_group() -> None:
    assert compile_pattern(r"loss ([0-9.]+)").groups == 1
    with pytest.raises(ValueError, match="regular expression"):
        compile_pattern("images/sec: ([0-9.]+")
    with pytest.raises(ValueError, match="group"):
        compile_pattern("images/sec: [0-9.]+")
    assert compile_pattern("done", group=False).pattern == "done"


def test_on_sample_sees_timed_samples_and_cannot_break_feeding() -> None:
    seen: list[tuple[str, str, float]] = []

    def push(name: str, unit: str, value: float) -> None:
        seen.append((name, unit, value))
        raise RuntimeError("pushgateway down")

    extractor = Extractor(ExtractionRules(metrics=(IMAGES,)), True, on_sample=push)
    for line in TORCH_LOG.splitlines():
        extractor.feed(line)
    assert seen == [("images_per_s", "images/s", v) for v in (845.0, 860.0, 875.0)]
    assert len(extractor.finish().metrics["images_per_s"].timed) == 3


def _mllog_text(tmp_path: Path, status: str = "success") -> str:
    """Lines written by the real mlperf_logging logger, into a file, as an MLPerf reference would."""
    from mlperf_logging.mllog import constants, mllog

    path = tmp_path / "mllog.log"
    logger = logging.getLogger(f"kaliper-test-mllog-{tmp_path.name}-{status}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(path)
    logger.addHandler(handler)
    ml = mllog.MLLogger(logger=logger, default_clear_line=False)
    try:
        ml.event(key=constants.SUBMISSION_BENCHMARK, value="resnet")
        ml.event(key=constants.GLOBAL_BATCH_SIZE, value=256)
        ml.event(key=constants.SEED, value=7)
        ml.start(key=constants.RUN_START, time_ms=1_000_000)
        for epoch, accuracy in enumerate([0.41, 0.62, 0.71, 0.76], start=1):
            ml.start(key=constants.EPOCH_START, metadata={constants.EPOCH_NUM: epoch})
            ml.event(key="throughput", value={"samples_per_s": 1000.0 + epoch}, metadata={"step": epoch * 10})
            ml.event(key=constants.EVAL_ACCURACY, value=accuracy, metadata={constants.EPOCH_NUM: epoch})
            ml.event(key="eval_loss", value=2.0 - accuracy, metadata={constants.EPOCH_NUM: epoch})
        ml.end(key=constants.RUN_STOP, metadata={constants.STATUS: status}, time_ms=1_093_500)
    finally:
        handler.close()
        logger.removeHandler(handler)
    return "some framework chatter\n" + path.read_text()


def test_mllog_from_the_real_logger(tmp_path: Path) -> None:
    rules = ExtractionRules(format="mllog", skip_first=1)
    extraction = extract_text(_mllog_text(tmp_path), rules, stream="stdout")
    ttt = extraction.metrics[TIME_TO_TRAIN]
    assert [s.value for s in ttt.timed] == [93.5] and ttt.unit == "s" and ttt.direction == "less_is_better"
    accuracy = extraction.metrics["eval_accuracy"]
    assert [s.value for s in accuracy.warmup] == [0.41]
    assert [s.value for s in accuracy.timed] == [0.62, 0.71, 0.76]
    assert accuracy.direction == "more_is_better" and accuracy.formula == "mllog key eval_accuracy"
    assert extraction.metrics["eval_loss"].direction == "less_is_better"
    assert [s.value for s in extraction.metrics["throughput.samples_per_s"].timed] == [1002.0, 1003.0, 1004.0]
    assert extraction.constants == {"submission_benchmark": "resnet", "global_batch_size": 256, "seed": 7}
    assert extraction.problems == []
    assert judge(extraction, rules, exit_code=0, replica="master-0", primary=True) is None


def test_mllog_aborted_run_missing_stop_and_no_mllog_at_all(tmp_path: Path) -> None:
    rules = ExtractionRules(format="mllog")
    aborted = extract_text(_mllog_text(tmp_path, "aborted"), rules)
    reason = judge(aborted, rules, exit_code=0, replica="master-0", primary=True)
    assert reason is not None and "has status 'aborted', not 'success'" in reason
    text = "\n".join(line for line in _mllog_text(tmp_path, "x").splitlines() if "run_stop" not in line)
    assert judge(extract_text(text, rules), rules, exit_code=0, replica="m", primary=True) == (
        "mllog: no run_stop event, so no time to train"
    )
    nothing = extract_text("hello", rules)
    assert judge(nothing, rules, exit_code=0, replica="master-0", primary=True) == (
        "no ':::MLLOG' line in master-0's output (metrics_format: mllog); last lines: \"hello\""
    )
    assert judge(nothing, rules, exit_code=0, replica="worker-0", primary=False) is None
    broken = extract_text(':::MLLOG {"key": "run_start", "value"', rules)
    assert broken.problems[0].startswith("mllog: output line 1 does not parse")


def test_jsonl_metrics_file_with_garbage_lines() -> None:
    rules = ExtractionRules(format="jsonl", skip_first=1)
    text = "\n".join(
        [
            '{"name": "tokens_per_s", "value": 900, "unit": "tokens/s", "step": 1}',
            '{"name": "tokens_per_s", "value": 950.5, "unit": "ignored", "step": 2}',
            "",
            "not json at all",
            '{"name": "loss", "value": 2.1}',
            '{"name": "loss", "value": "2.0"}',
            '{"name": "loss", "value": NaN}',
            '{"name": "tokens_per_s", "value": 990, "better": "sideways"}',
            '{"name": "loss", "value": 1.9}',
        ]
    )
    extraction = extract_text(text, rules, stream="metrics")
    tokens = extraction.metrics["tokens_per_s"]
    assert [s.value for s in tokens.timed] == [950.5] and tokens.unit == "tokens/s"
    assert tokens.direction == "more_is_better"
    loss = extraction.metrics["loss"]
    assert [s.value for s in loss.timed] == [1.9] and [(s.stream, s.line) for s in loss.timed] == [
        ("metrics", 9)
    ]
    assert loss.direction == "less_is_better" and loss.formula == f"jsonl name 'loss' in ${METRICS_FILE_ENV}"
    assert [p.split(" is ")[0] for p in extraction.problems] == [
        f"metrics metrics line {n}" for n in (4, 6, 7, 8)
    ]
    reason = judge(extraction, rules, exit_code=0, replica="master-0", primary=True)
    assert reason is not None and reason.startswith("metrics metrics line 4 is not JSON: 'not json at all'")
    many = extract_text("\n".join(["garbage"] * 20), rules, stream="metrics")
    assert len(many.problems) == 6 and many.problems[-1] == "... and 15 more problems"
    none = extract_text("", rules, stream="metrics")
    assert judge(none, rules, exit_code=0, replica="master-0", primary=True).startswith(  # type: ignore[union-attr]
        "no metric line from master-0 (metrics_format: jsonl"
    )


def test_emit_round_trip_through_a_real_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv(METRICS_FILE_ENV, str(path))
    for step, value in enumerate([3.0, 2.5, 2.25, 2.0], start=1):
        emit("loss", value, better="lower", step=step)
        emit("samples_per_s", 100 + step, unit="samples/s")
    rules = ExtractionRules(format="jsonl")
    extraction = extract_text(path.read_text(), rules, stream="metrics")
    assert [s.value for s in extraction.metrics["loss"].timed] == [3.0, 2.5, 2.25, 2.0]
    assert extraction.metrics["samples_per_s"].unit == "samples/s"
    assert judge(extraction, rules, exit_code=0, replica="master-0", primary=True) is None
    with pytest.raises(TypeError):
        emit("loss", "fast")  # type: ignore[arg-type]


def test_emit_without_a_metrics_file_prints_lines_the_extraction_reads() -> None:
    code = "from kaliper.wrapper.emit import emit; emit('acc', 0.9); emit('acc', 0.95)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.stderr.splitlines() == [
        EMIT_PREFIX + '{"name":"acc","value":0.9}',
        EMIT_PREFIX + '{"name":"acc","value":0.95}',
    ]
    extraction = extract_text(done.stderr, ExtractionRules(format="jsonl"), stream="stderr")
    assert [s.value for s in extraction.metrics["acc"].timed] == [0.9, 0.95]
    assert extraction.metrics["acc"].formula == "jsonl name 'acc' in kaliper.emit lines"


def test_direction_rule() -> None:
    assert [guess_direction(n) for n in ("eval_loss", "time_to_train", "p99_latency", "eval_error")] == [
        "less_is_better"
    ] * 4
    assert guess_direction("eval_accuracy") == guess_direction("throughput") == "more_is_better"


def test_memory_stays_bounded_over_two_million_lines_and_long_lines_are_cut() -> None:
    """2,000,000 lines (about 230 MB) through one extractor: the last 300,000 and 40 lines of 100 kB
    are traced, and together they leave less than 250 kB behind (one byte a line would be 300 kB).
    Tracing all of them would take the test past its time: tracemalloc slows each allocation."""
    rules = ExtractionRules(
        metrics=(PatternMetric("ips", r"images/sec: ([0-9.]+)"),), success_pattern="never"
    )
    extractor = Extractor(rules, primary=True)
    lines = [f"step {i} | loss 2.31 | 812.4 img/s | " + "padding " * 10 for i in range(1000)]
    for i in range(1_700_000):
        extractor.feed(lines[i % 1000], "stdout")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(300_000):
            extractor.feed(lines[i % 1000], "stderr" if i % 7 == 0 else "stdout")
        for i in range(40):
            extractor.feed(f"{i} " + "z" * 100_000)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 250_000, grown
    huge = "images/sec: 5 " + "y" * (3 * MAX_LINE) + " images/sec: 6"  # past MAX_LINE: cut, so no 6
    extractor.feed(huge, "stderr")
    extraction = extractor.finish()
    assert extraction.lines_seen == 2_000_041
    assert [s.value for s in extraction.metrics["ips"].timed] == [5.0]
    assert max(len(t) for t in extraction.last_lines) <= 201 and len(extraction.last_lines) == 30
