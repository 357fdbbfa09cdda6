"""transformer-train / transformer-infer parameters: declared with bounds, a rule between d_model and heads,
bad values refused before anything runs (exit 2, the field named); the FLOP formulas' arithmetic.

The formulas are checked against torch.utils.flop_counter in tests/integration/test_transformer_torch.py
(it runs torch); here only what needs no framework."""

from __future__ import annotations

from pathlib import Path

import pytest

from kaliper.benchmarks.catalog import get_workload
from kaliper.benchmarks.transformer import flops
from kaliper.configurator import configure
from kaliper.errors import ParameterError
from kaliper.spec import load_spec
from tests.support.cli import CliRunner

SPEC = """\
name: tf-bad
workload:
  name: transformer-train
  framework: pytorch
  params: {{layers: 1, d_model: 64, seq_len: 16, batch_size: 2, vocab: 64, device: cpu, threads: 1{extra}}}
matrix:
  heads: {heads}
repetitions: 1
sampling: {{warmup: 0, min_samples: 6, max_samples: 6, max_time: 1s}}
job:
  kind: PyTorchJob
  replicas: {{Master: 1}}
  image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0
storage: file://./store
"""


@pytest.mark.parametrize("name", ["transformer-train", "transformer-infer"])
def test_params_are_declared_with_bounds(name: str) -> None:
    params = get_workload(name).params
    for sized in ("layers", "d_model", "heads", "vocab", "batch_size"):
        param = params.get(sized)
        assert param is not None and param.minimum is not None and param.minimum >= 1
        assert param.help
    assert params.get("precision").choices == ("fp32", "bf16", "fp16")  # type: ignore[union-attr]
    assert params.get("compile").choices == ("none", "default", "max-autotune")  # type: ignore[union-attr]
    assert get_workload(name).implementation_target("pytorch").startswith("kaliper.benchmarks.transformer.")
    resolved = params.resolve({}, name, "params")  # the defaults obey the rules between parameters
    assert int(resolved["d_model"]) % int(resolved["heads"]) == 0


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"d_model": 66, "heads": 4}, "params.d_model: expected a multiple of heads=4"),
        ({"heads": 0}, "params.heads: expected a value >= 1, found 0"),
        ({"precision": "fp8"}, "params.precision: expected one of fp32, bf16, fp16, found 'fp8'"),
        ({"compile": "reduce-overhead"}, "params.compile: expected one of none, default, max-autotune"),
        ({"output_len": 1}, "params.output_len: expected a value >= 2, found 1"),
        ({"seq_len": 8}, "workload transformer-infer has no parameter 'seq_len'"),
    ],
)
def test_bad_params_are_refused(given: dict[str, object], message: str) -> None:
    with pytest.raises(ParameterError, match=message.replace("(", r"\(")):
        get_workload("transformer-infer").params.resolve(given, "transformer-infer", "params")


def test_a_matrix_point_that_breaks_the_rule_fails_configuration(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(SPEC.format(extra="", heads="[1, 2, 4]"))
    loaded = load_spec(good)
    assert len(configure(loaded, experiment_id="tf-good").trials) == 3
    bad = tmp_path / "bad.yaml"
    bad.write_text(SPEC.format(extra="", heads="[2, 3]"))  # 64 is no multiple of 3
    with pytest.raises(ParameterError, match="d_model: expected a multiple of heads=3"):
        configure(load_spec(bad), experiment_id="tf-bad")


def test_cli_refuses_a_bad_spec_with_exit_2(kaliper: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC.format(extra=", precision: fp64", heads="[4]"))
    proc = kaliper("validate", "spec.yaml")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "workload.params.precision: expected one of fp32, bf16, fp16, found 'fp64'" in proc.stderr
    assert "Traceback" not in proc.stderr
    (tmp_path / "spec.yaml").write_text(SPEC.format(extra="", heads="[3]"))
    proc = kaliper("run", "spec.yaml")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "d_model: expected a multiple of heads=3" in proc.stderr
    assert not (tmp_path / "store").exists()


def test_flop_formulas_by_hand() -> None:
    # L=2, d=64, V=100: N_body = 2·(12·64² + 13·64) + 2·64 = 100,096; N_head = 6,400
    shape = flops.Shape(layers=2, d_model=64, vocab=100)
    assert (shape.n_body, shape.n_head, shape.n) == (100_096, 6_400, 106_496)
    # batch 3 × seq 16: T = 48; 6·N·T + 12·L·d·s·T
    assert flops.train_flops(shape, 3, 16) == 6 * 106_496 * 48 + 12 * 2 * 64 * 16 * 48
    assert flops.prefill_flops(shape, 3, 16) == 3 * (2 * 100_096 * 16 + 2 * 6_400 + 4 * 2 * 64 * 16 * 16)
    assert flops.decode_flops(shape, 3, 17) == 3 * (2 * 106_496 + 4 * 2 * 64 * 17)
    # output_len 4 after a 16-token prompt: decode steps with caches of 17, 18, 19 positions
    assert flops.generation_decode_flops(shape, 3, 16, 4) == sum(
        flops.decode_flops(shape, 3, c) for c in (17, 18, 19)
    )
