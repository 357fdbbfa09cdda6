"""The serving examples as a new user runs them: Offline VALID on any machine (its expected QPS measured,
not hand-tuned), and the LLM endpoint example's demo server started whatever `python` is first on PATH.
Shrunk by the test (shorter windows), never edited for it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import CliRunner
from tests.support.paths import EXAMPLES


def shrunk(name: str, tmp_path: Path, **params: Any) -> Path:
    spec = yaml.safe_load((EXAMPLES / name).read_text())
    spec["workload"]["params"].update(params)
    spec["repetitions"] = 1
    spec["storage"] = "file://./store"
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return path


def record_of(tmp_path: Path) -> dict[str, Any]:
    path = next((tmp_path / "store").glob("experiments/*/trials/t000/runs/0/master-0.json"))
    return dict(json.loads(path.read_text()))


def test_the_offline_example_is_valid_with_its_expected_qps_measured(
    kaliper: CliRunner, tmp_path: Path
) -> None:
    spec = shrunk("serve-resnet-offline.yaml", tmp_path, min_duration="1s")
    out = kaliper("run", spec.name, env={"KALIPER_INTERFERENCE": "off", "KALIPER_PREFLIGHT": "off"})
    assert out.returncode == 0, out.stderr
    derived = record_of(tmp_path)["derived"]
    assert derived["valid"] is True, derived["loadgen"]["invalid_reasons"]
    calibration = derived["calibration"]
    assert derived["expected_qps"] == calibration["expected_qps"]
    assert calibration["expected_qps"] == pytest.approx(calibration["measured_qps"] * 1.5, rel=1e-5)
    assert derived["loadgen"]["settings"]["offline_expected_qps"] == derived["expected_qps"]
    assert derived["model"]["warmup"]["batch_sizes"] == list(range(16, 0, -1))


def test_the_endpoint_examples_server_starts_without_an_activated_environment(
    kaliper: CliRunner, tmp_path: Path
) -> None:
    """`python` first on PATH is one without Kaliper (this directory's): the demo server still starts,
    with the interpreter running Kaliper."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python").write_text("#!/bin/sh\necho 'not the python you want' >&2\nexit 3\n")
    (fake / "python").chmod(0o755)
    spec = shrunk("serve-llm-endpoint.yaml", tmp_path, min_duration="1s", min_query_count=4, warmup="2")
    env = {
        "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}",
        "KALIPER_INTERFERENCE": "off",
        "KALIPER_PREFLIGHT": "off",
    }
    out = kaliper("run", spec.name, env=env)
    assert out.returncode in (0, 1), out.stderr  # a 4-query window may be INVALID by LoadGen's early stopping
    record = record_of(tmp_path)
    assert record["recorded_by"] == "workload", record.get("error")
    server = record["derived"]["server"]
    assert server["argv0"] == "python" and server["ready_s"] > 0
    assert record["derived"]["warmup"]["queries"] == 2 and record["derived"]["warmup"]["failed"] == 0
