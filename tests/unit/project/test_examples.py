"""Every example spec validates and configures (renders its job manifest for every trial)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kaliper.configurator import configure
from kaliper.spec import load_spec
from tests.support.paths import EXAMPLES

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))


def test_there_are_examples() -> None:
    assert EXAMPLE_FILES


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_validates_and_configures(path: Path) -> None:
    loaded = load_spec(path)
    plan = configure(loaded, experiment_id=f"{loaded.spec.name}-example")
    assert len(plan.trials) >= 1
    for trial in plan.trials:
        assert trial.manifest["kind"] == loaded.spec.job.kind
