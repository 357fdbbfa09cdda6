"""The spec's `executor:` (which backend runs `kaliper run`'s jobs) and its `slurm:` section.

`executor` names a backend (kaliper.execution.executor's registry); EXECUTORS is the schema's list of the
names a spec may give, checked here so a typo fails before anything runs. `slurm:` says what a Slurm site
needs beyond `job:` (which Kaliper maps itself: resources to --cpus-per-task, --mem-per-cpu, --gres,
job.timeout to --time): the partition, account, QoS, node constraint, exclusive nodes, the container
runtime for `job.image`, and extra sbatch options. Every value is checked here and goes to sbatch as one
argument of an argv list, never into a shell line.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from kaliper.spec.services import StrictModel

# The backends a spec may name (the registry in kaliper.execution.executor maps each to its module).
EXECUTORS = ("local", "slurm")
Executor = Literal["local", "slurm"]

# A Slurm name (partition, account, QoS): letters, digits and . _ - (Slurm allows more; sites use these).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# A node feature expression: features joined by & | (and brackets, counts), as --constraint takes them.
_CONSTRAINT = re.compile(r"[A-Za-z0-9_.&|\[\]*(),:-]{1,256}")
# One extra sbatch option: `--name=value` or `--flag`, its value without whitespace or shell-special text.
_OPTION = re.compile(r"--[a-z][a-z0-9-]{0,40}(=[A-Za-z0-9_.,:/@%+=-]{1,200})?")
# What Kaliper sets itself from `job:`, the spec's other fields or the run: never again through `extra`.
RESERVED = (
    "--ntasks",
    "--ntasks-per-node",
    "--nodes",
    "--cpus-per-task",
    "--mem",
    "--mem-per-cpu",
    "--gres",
    "--time",
    "--partition",
    "--account",
    "--qos",
    "--constraint",
    "--exclusive",
    "--output",
    "--error",
    "--job-name",
    "--parsable",
    "--wrap",
    "--chdir",
    "--export",
)


class SlurmSpec(StrictModel):
    partition: str | None = Field(None, description="sbatch --partition")
    account: str | None = Field(None, description="sbatch --account")
    qos: str | None = Field(None, description="sbatch --qos")
    constraint: str | None = Field(None, description="sbatch --constraint: node features (e.g. a100&ib)")
    exclusive: bool = Field(
        False, description="sbatch --exclusive: the nodes are the run's alone (recorded with the run)"
    )
    nodes: int = Field(1, ge=1, le=1024, description="nodes the job's tasks spread over (sbatch --nodes)")
    container: Literal["none", "pyxis", "apptainer"] = Field(
        "none",
        description="how `job.image` runs: none (the stack's environment on the node; the image is recorded "
        "only), pyxis (srun --container-image) or apptainer (apptainer exec docker://IMAGE)",
    )
    extra: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="more sbatch options, each `--name=value` or `--flag` (not those Kaliper sets itself)",
    )

    @field_validator("partition", "account", "qos")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.fullmatch(value):
            raise ValueError(f"expected a Slurm name (letters, digits, . _ -), found {value!r}")
        return value

    @field_validator("constraint")
    @classmethod
    def _constraint(cls, value: str | None) -> str | None:
        if value is not None and not _CONSTRAINT.fullmatch(value):
            raise ValueError(f"expected node features joined by & or |, found {value!r}")
        return value

    @field_validator("extra")
    @classmethod
    def _extra(cls, values: list[str]) -> list[str]:
        for value in values:
            if not _OPTION.fullmatch(value):
                raise ValueError(
                    f"expected an sbatch option `--name=value` or `--flag` (no spaces, no shell text), found {value!r}"
                )
            name = value.split("=", 1)[0]
            if name in RESERVED:
                raise ValueError(f"{name} is set by Kaliper (from job:, slurm: or the run), found {value!r}")
        return values

    def is_default(self) -> bool:
        return self == SlurmSpec()
