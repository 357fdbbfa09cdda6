"""Pure decisions of kaliper.stacks: pip's configuration as uv arguments, lock lines, the CUDA check,
uv's errors cut down."""

from __future__ import annotations

from kaliper.stacks.lock import cuda_packages, cuda_refusal, lock_lines, lock_packages, normalize_name
from kaliper.stacks.pipconfig import parse_pip_config
from kaliper.stacks.uvtool import error_summary

THIS_MACHINE = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
"""


def test_pip_config_of_this_machine() -> None:
    config = parse_pip_config(THIS_MACHINE)
    assert config.args == [
        "--extra-index-url",
        "file:///opt/pypi/simple",
        "--extra-index-url",
        "file:///opt/pypi-more/simple",
        "--find-links",
        "/opt/wheels",
        "--index-strategy",
        "unsafe-best-match",
    ]
    assert config.cert == "/etc/ssl/certs/ca-certificates.crt"


def test_pip_config_precedence_env_then_install_then_global() -> None:
    text = (
        "global.index-url='https://global/simple'\n"
        "install.index-url='https://install/simple'\n"
        "global.find-links='/g'\n"
        ":env:.find-links='/e1 /e2'\n"
        "download.extra-index-url='https://ignored/simple'\n"
        "user.index-url='https://not-a-section-pip-prints/simple'\n"
    )
    assert parse_pip_config(text, {"UV_INDEX_STRATEGY": "first-index"}).args == [
        "--index-url",
        "https://install/simple",
        "--find-links",
        "/e1",
        "--find-links",
        "/e2",
    ]


def test_pip_config_odd_lines_and_no_index() -> None:
    text = 'WARNING: something\n\nglobal.no-index="true"\nnot a line\n:env:.index-url=https://x/simple\n'
    assert parse_pip_config(text).args == [
        "--index-url",
        "https://x/simple",
        "--index-strategy",
        "unsafe-best-match",
        "--no-index",
    ]
    assert parse_pip_config("").args == []
    assert parse_pip_config("").cert is None


def test_lock_lines_and_packages() -> None:
    output = "# comment\n\nnumpy==1.26.4\n    # via x\nTyping_Extensions==4.16.0\n--find-links /x\ntorch==2.13.0+cpu ; sys_platform == 'linux'\n"
    lines = lock_lines(output)
    assert lines == [
        "numpy==1.26.4",
        "Typing_Extensions==4.16.0",
        "torch==2.13.0+cpu ; sys_platform == 'linux'",
    ]
    assert lock_packages(lines) == {"numpy": "1.26.4", "typing-extensions": "4.16.0", "torch": "2.13.0+cpu"}
    assert normalize_name("Foo.Bar__baz") == "foo-bar-baz"


def test_cuda_detection() -> None:
    # nvidia-ml-py (Kaliper's own NVML binding, pure Python) is in every lock: no CUDA build.
    cpu = lock_packages(["torch==2.13.0+cpu", "numpy==1.26.4", "sympy==1.14.0", "nvidia-ml-py==13.615.71"])
    assert cuda_packages(cpu) == []
    pypi = lock_packages(
        [
            "torch==2.14.1",
            "triton==3.8.0",
            "nvidia-cublas==13.1.1.3",
            "cuda-toolkit==13.0.3.0",
            "numpy==2.1.0",
        ]
    )
    # torch 2.14.1 from PyPI has no local tag: what it pulls in gives it away.
    assert cuda_packages(pypi) == ["triton==3.8.0", "cuda-toolkit==13.0.3.0", "nvidia-cublas==13.1.1.3"]
    assert cuda_packages({"torch": "2.13.0+cu128"}) == ["torch==2.13.0+cu128"]
    message = cuda_refusal("spec.yaml", "new", cuda_packages(pypi))
    assert message.startswith(
        "spec.yaml: stacks[new]: the requirements resolve to a CUDA build (triton==3.8.0"
    )
    assert "torch==2.13.0" in message and "allow_cuda: true" in message


def test_error_summary_keeps_what_uv_says_is_wrong() -> None:
    stderr = (
        "Resolved in 3ms\n"
        "error: No solution found when resolving dependencies\n"
        "  cause: Because you require numpy==1.26.4 and numpy==2.1.0, we can conclude that your\n"
        "         requirements are unsatisfiable.\n"
    )
    summary = error_summary(stderr)
    assert summary.startswith("No solution found when resolving dependencies; cause: Because you require")
    assert "Resolved" not in summary
    # A sentence wrapped at uv's output width stays one sentence, whatever the width.
    assert "we can conclude that your requirements are unsatisfiable." in summary
    wrapped = (
        "  × No solution found when resolving dependencies:\n"
        "  ╰─▶ Because kaliper-no-such-package-xyz was not found in the package\n"
        "      registry and you require kaliper-no-such-package-xyz, we can conclude\n"
        "      that your requirements are unsatisfiable.\n"
    )
    assert error_summary(wrapped) == (
        "× No solution found when resolving dependencies:; ╰─▶ Because kaliper-no-such-package-xyz was "
        "not found in the package registry and you require kaliper-no-such-package-xyz, we can conclude "
        "that your requirements are unsatisfiable."
    )
    assert error_summary("a\nb\nc\n", limit=2) == "b; c"
    assert error_summary("") == "(no message)"
