"""`compile` and `memory_format` are PyTorch's (torch.compile, torch's memory format): a TensorFlow spec
that sets them to anything but their defaults is refused before anything runs, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from kaliper.errors import SpecError
from kaliper.spec.loader import spec_from_text
from tests.support.cli import CliRunner

SPEC = """\
name: cnn
workload:
  name: cnn-infer
  framework: {framework}
  params: {{model: small, image_size: 32, {params}}}
{matrix}repetitions: 1
job:
  kind: {kind}
  replicas: {{{replica}: 1}}
  image: ghcr.io/kaliper-dev/kaliper:0.1.0
"""


def spec(framework: str, params: str = "", matrix: str = "") -> str:
    kind, replica = ("TFJob", "Chief") if framework == "tensorflow" else ("PyTorchJob", "Master")
    return SPEC.format(framework=framework, params=params, matrix=matrix, kind=kind, replica=replica)


@pytest.mark.parametrize(
    ("params", "matrix", "field"),
    [
        (
            "compile: default",
            "",
            "workload.params.compile: compile 'default' is not available with framework tensorflow",
        ),
        ("memory_format: channels_last", "", "workload.params.memory_format: memory_format 'channels_last'"),
        ("", "matrix:\n  compile: [none, max-autotune]\n", "matrix.compile[1]: compile 'max-autotune'"),
    ],
)
def test_tensorflow_refuses_torch_only_parameters(
    params: str, matrix: str, field: str, tmp_path: Path
) -> None:
    with pytest.raises(SpecError) as caught:
        spec_from_text(spec("tensorflow", params, matrix), "spec.yaml", tmp_path)
    assert str(caught.value).startswith(f"spec.yaml: {field}")
    assert "(only pytorch; tensorflow takes" in str(caught.value)


def test_their_defaults_and_pytorch_are_accepted(tmp_path: Path) -> None:
    spec_from_text(spec("tensorflow", "compile: none, memory_format: contiguous"), "spec.yaml", tmp_path)
    matrix = (
        "matrix:\n  compile: [none, default, max-autotune]\n  memory_format: [contiguous, channels_last]\n"
    )
    spec_from_text(spec("pytorch", "", matrix), "spec.yaml", tmp_path)


def test_the_cli_exits_2_naming_the_field(kaliper: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(spec("tensorflow", "memory_format: channels_last"))
    done = kaliper("validate", "spec.yaml", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "workload.params.memory_format: memory_format 'channels_last' is not available" in done.stderr
    assert "Traceback" not in done.stderr
