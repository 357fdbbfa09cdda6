"""The `stacks:` entries of a spec: what differs between two otherwise identical measurements.

On a cluster a stack is an image (and `env`); on one machine it is pinned `requirements` (inline or a
`requirements_file`), a `python` interpreter and/or `env`. A stack with requirements or an interpreter
gets its own virtual environment (kaliper.stacks); one with only `env` runs in the current environment.
What the fields may hold is checked here; whether the requirements resolve is kaliper.stacks' (uv), before
any run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from kaliper.errors import SpecError, is_secret_name
from kaliper.spec.job import check_image
from kaliper.spec.services import StrictModel

# RFC 1035 label: the training operator names a Service per replica after the job (the stack's name is
# part of trial names), and Service names must start with a letter.
DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_REQUIREMENT = 1024
MAX_ENV_VALUE = 4096
MAX_REQUIREMENTS_FILE = 1 << 20
# Variables a stack may not set: Kaliper's own run variables, and what the training operator injects
# (a stack that set them would break the job, not describe a software stack).
RESERVED_PREFIXES = ("KALIPER_",)
RESERVED_NAMES = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "TF_CONFIG", "PYTHONPATH", "PYTHONHOME"}
)


class StackSpec(StrictModel):
    """One software stack to compare: an image (cluster), pinned requirements, an interpreter, env."""

    name: str = Field(description="a DNS label of at most 20 characters, unique in the spec")
    image: str | None = Field(
        None, description="what a cluster runs for this stack (pinned: a version tag or a digest)"
    )
    requirements: list[str] = Field(
        default_factory=list,
        max_length=1000,
        description="pip requirement specifiers, one per entry (no options); built into the stack's own "
        "environment with uv",
    )
    requirements_file: str | None = Field(
        None, description="a pip requirements file, relative to the spec (requirement lines and comments)"
    )
    env: dict[str, str] = Field(
        default_factory=dict, max_length=200, description="environment variables of the stack's replicas"
    )
    python: str | None = Field(
        None, description="an interpreter already on this machine (name on PATH or absolute path)"
    )
    allow_cuda: bool = Field(
        False,
        strict=True,
        description="allow requirements that install a CUDA build on a machine without a GPU",
    )

    @field_validator("name")
    @classmethod
    def _label(cls, value: str) -> str:
        if len(value) > 20 or not DNS_LABEL.fullmatch(value):
            raise ValueError("expected a DNS label (starting with a letter) of at most 20 characters")
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        return None if value is None else check_image(value)

    @field_validator("requirements")
    @classmethod
    def _requirements(cls, value: list[str]) -> list[str]:
        for i, line in enumerate(value):
            problem = requirement_problem(line)
            if problem is not None:
                raise ValueError(f"[{i}]: {problem}")
        return value

    @field_validator("requirements_file")
    @classmethod
    def _requirements_file(cls, value: str | None) -> str | None:
        if value is not None and (
            not value or len(value) > 1024 or not value.isprintable() or Path(value).is_absolute()
        ):
            raise ValueError(
                "expected a path relative to the spec's directory (printable, 1 to 1024 characters)"
            )
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env_values(cls, value: Any) -> Any:
        """YAML reads `OMP_NUM_THREADS: 1` as a number: take numbers as their text, refuse booleans
        (`true` is `True`, `on`, `yes`... in YAML: write the value quoted)."""
        if not isinstance(value, dict):
            return value
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(item, bool):
                raise ValueError(f'{key}: expected a string, found a boolean; quote it (e.g. "1" or "true")')
            out[key] = str(item) if isinstance(item, int | float) else item
        return out

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            problem = env_problem(key, item)
            if problem is not None:
                raise ValueError(problem)
        return value

    @field_validator("python")
    @classmethod
    def _python(cls, value: str | None) -> str | None:
        if value is not None and (not value or len(value) > 1024 or not value.isprintable() or " " in value):
            raise ValueError("expected an interpreter's name on PATH or its absolute path, without spaces")
        return value

    def needs_environment(self) -> bool:
        """Whether running this stack locally needs a virtual environment of its own."""
        return bool(self.requirements or self.requirements_file or self.python)


def requirement_problem(line: str) -> str | None:
    """Why a requirement entry is not one pip requirement specifier; None when it is one.

    Options (`-r`, `-e`, `--index-url`, ...) are refused: a stack names packages, and where they come from
    is this machine's index configuration (pip's, which kaliper.stacks hands to uv)."""
    if not line.strip() or len(line) > MAX_REQUIREMENT or not line.isprintable():
        return f"expected one pip requirement per entry (printable, 1 to {MAX_REQUIREMENT} characters)"
    if line.lstrip().startswith("-"):
        return f"{line.strip()!r}: options are not supported in a stack; give requirement specifiers only"
    return None


def env_problem(name: str, value: str) -> str | None:
    """Why `name=value` cannot be a stack's environment variable; None when it can."""
    if not ENV_NAME.fullmatch(name) or len(name) > 256:
        return f"{name!r}: not a valid environment variable name (letters, digits, '_'; not starting with a digit)"
    if name.startswith(RESERVED_PREFIXES) or name in RESERVED_NAMES:
        return f"{name}: set by Kaliper or the training operator for every replica; a stack cannot set it"
    if is_secret_name(name):
        return (
            f"variable {name} is named like a credential; a spec never holds credentials (set it in the "
            "environment or a Kubernetes Secret)"
        )
    if len(value) > MAX_ENV_VALUE or "\x00" in value:
        return f"{name}: expected a value of at most {MAX_ENV_VALUE} characters without NUL"
    return None


def stack_requirements(stack: StackSpec, base_dir: Path, source: str) -> list[str]:
    """The stack's requirements: `requirements_file`'s lines (comments and blank lines dropped) then
    `requirements`. A SpecError naming the file and line for an unreadable file or a bad line."""
    lines: list[str] = []
    if stack.requirements_file is not None:
        path = base_dir / stack.requirements_file
        where = f"{source}: stacks[{stack.name}].requirements_file"
        try:
            data = path.read_bytes()[: MAX_REQUIREMENTS_FILE + 1]
        except OSError as exc:
            raise SpecError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
        if len(data) > MAX_REQUIREMENTS_FILE:
            raise SpecError(f"{where}: {path} is larger than {MAX_REQUIREMENTS_FILE} bytes")
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise SpecError(f"{where}: {path} is not UTF-8 text") from None
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
            if not line:
                continue
            problem = requirement_problem(line)
            if problem is not None:
                raise SpecError(f"{where}: {path}:{number}: {problem}")
            lines.append(line)
    return [*lines, *stack.requirements]
