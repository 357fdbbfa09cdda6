"""A serve spec's bad input files and lengths are refused by `kaliper run` before anything runs or is sent:
exit 2, one line naming the spec, the field, the file (and its line or entry), what was expected and what
was found; no experiment written. The server named in the spec does not exist: nothing may reach it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import in_process
from tests.support.paths import DATA

SPEC = """
name: bad-serve
workload:
  name: serve
  framework: numpy
  params: {params}
repetitions: 1
job:
  kind: PyTorchJob
  replicas: {{Master: 1}}
  image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0
storage: file://./store
"""
# Port 9 (discard) on loopback: nothing listens there, and nothing must try.
BASE = {"sut": "http", "url": "http://127.0.0.1:9/v1/completions", "scenario": "Server", "target_qps": 2}


def refused(tmp_path: Path, files: dict[str, bytes], **params: object) -> str:
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    (tmp_path / "spec.yaml").write_text(SPEC.format(params=json.dumps({**BASE, **params})))
    out = in_process("run", "spec.yaml", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("experiment.json"))
    assert "Traceback" not in out.stderr
    line = out.stderr.strip()
    assert line.startswith("error: ") and "spec.yaml" in line, line
    return line


def test_a_dataset_that_is_not_there(tmp_path: Path) -> None:
    line = refused(tmp_path, {}, dataset="data/missing.jsonl")
    assert "workload.params.dataset" in line and "data/missing.jsonl" in line


def test_a_dataset_that_is_not_json(tmp_path: Path) -> None:
    line = refused(tmp_path, {"p.jsonl": b'{"prompt": "fine"}\n{not json\n'}, dataset="p.jsonl")
    assert "dataset" in line and "p.jsonl" in line and "line 2" in line


def test_an_empty_dataset(tmp_path: Path) -> None:
    line = refused(tmp_path, {"p.jsonl": b"\n"}, dataset="p.jsonl")
    assert "dataset" in line and "p.jsonl" in line and "empty" in line


def test_a_request_longer_than_the_models_context(tmp_path: Path) -> None:
    long = json.dumps({"prompt": " ".join(["word"] * 300), "output_tokens": 64}).encode()
    short = json.dumps({"prompt": "hello there"}).encode()
    line = refused(tmp_path, {"p.jsonl": short + b"\n" + long + b"\n"}, dataset="p.jsonl", context_length=256)
    assert "context_length" in line and "p.jsonl" in line and "line 2" in line


def test_a_tokenizer_that_does_not_load(tmp_path: Path) -> None:
    line = refused(
        tmp_path,
        {"tok/tokenizer.json": b'{"version": "1.0", "model": 42}'},
        tokenizer="tok",
        input_tokens="64",
    )
    assert "workload.params.tokenizer" in line and "tok/tokenizer.json" in line


def test_a_tokenizer_folder_without_one(tmp_path: Path) -> None:
    (tmp_path / "tok").mkdir()
    line = refused(tmp_path, {}, tokenizer="tok", input_tokens="64")
    assert "workload.params.tokenizer" in line and "tokenizer.json" in line


@pytest.mark.parametrize(
    "lengths",
    [
        "uniform(512, 128)",
        "normal(100, 10, min=500, max=600)",
        "histogram(128:0, 256:0)",
        "normal(64, -3)",
        "seven",
    ],
)
def test_a_distribution_with_impossible_bounds(tmp_path: Path, lengths: str) -> None:
    line = refused(tmp_path, {}, input_tokens=lengths)
    assert "workload.params.input_tokens" in line, line


def test_a_good_tokenizer_and_dataset_are_kept_with_the_experiment_and_counted_in_tokens(
    tmp_path: Path,
) -> None:
    """The same checks pass a good spec (validate writes nothing; the run's copy is tested end to end)."""
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_bytes((DATA / "tokenizer" / "tokenizer.json").read_bytes())
    (tmp_path / "p.jsonl").write_text(json.dumps({"prompt": "a b c d", "output_tokens": 8}) + "\n")
    (tmp_path / "spec.yaml").write_text(
        SPEC.format(
            params=json.dumps({**BASE, "dataset": "p.jsonl", "tokenizer": "tok", "dataset_repeat": True})
        )
    )
    out = in_process("validate", "spec.yaml", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
