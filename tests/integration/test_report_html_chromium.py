"""report.html from real local runs: its contents, and the page loaded in headless Chromium.

Two tiny experiments run in-process (`run_spec`): pi-matmul over two matrix sizes, and a user template
whose second trial crashes with a hostile parameter value and hostile stderr. The Chromium tests skip
without the `chromium` binary (Debian package chromium, `make services`), or fail in CI.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kaliper.application.pipeline import run_spec
from kaliper.reporter.building.formatting import format_number as num
from kaliper.reporter.building.report import Report, build_report
from kaliper.reporter.comparison.baseline import ReportComparisons
from kaliper.reporter.comparison.compare import Side, compare_results
from kaliper.reporter.writers.html import report_html
from kaliper.reporter.writers.html_page import page_shell
from kaliper.spec import load_spec
from kaliper.spec.services import ReportSpec
from kaliper.storage import open_storage
from tests.support.services import skip_or_fail

pytestmark = pytest.mark.slow

IMAGE = "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0"
HOSTILE_PARAM = "<script>alert(1)</script>"
HOSTILE_STDERR = "<img src=x onerror=alert(2)>"

MATMUL_SPEC = f"""\
name: html-matmul
workload:
  name: pi-matmul
  framework: pytorch
  params: {{dtype: float32, device: cpu, threads: 1}}
matrix:
  matrix_size: [32, 64]
repetitions: 2
sampling: {{warmup: 1, target_rel_ci: 0.5, min_samples: 6, max_samples: 30, max_time: 0.5s}}
job:
  kind: PyTorchJob
  replicas: {{Master: 1}}
  image: {IMAGE}
  timeout: 5m
"""

# Trial mode=ok runs pi-matmul; any other mode (the hostile string) exits 3 after printing to stderr.
CRASH_TEMPLATE = """
local k = import 'kaliper.libsonnet';
function(run, job, workload, params, sampling)
  local workloadArgs = k.workloadArgs(
    { name: 'pi-matmul', framework: 'pytorch' },
    { matrix_size: 32, threads: 1, calls_per_sample: 4 },
    sampling,
  );
  local fields =
    if params.mode == 'ok' then { command: ['kaliper'], args: workloadArgs }
    else { command: ['python'], args: ['-c', 'import sys; print("HOSTILE", file=sys.stderr); sys.exit(3)'] };
  {
    apiVersion: 'kubeflow.org/v1',
    kind: 'PyTorchJob',
    metadata: k.metadata(run),
    spec: {
      runPolicy: k.runPolicy(job),
      pytorchReplicaSpecs: {
        Master: {
          replicas: 1,
          restartPolicy: 'Never',
          template: {
            metadata: { labels: k.labels(run) },
            spec: { containers: [{ name: 'pytorch', image: job.image, env: k.env(run, job) } + fields] },
          },
        },
      },
    },
  }
""".replace("HOSTILE", HOSTILE_STDERR)

CRASH_SPEC = f"""\
name: html-failures
workload:
  template: job.jsonnet
matrix:
  mode: [ok, "{HOSTILE_PARAM}"]
repetitions: 2
sampling: {{warmup: 1, target_rel_ci: 0.5, min_samples: 6, max_samples: 20, max_time: 0.5s}}
job:
  kind: PyTorchJob
  replicas: {{Master: 1}}
  image: {IMAGE}
  timeout: 5m
"""

EXTERNAL_REF = re.compile(r"""(?:src|href|xlink:href|action)\s*=\s*["']?\s*(?:https?:)?//""", re.IGNORECASE)


def _run(tmp: Path, spec_text: str, template: str | None = None) -> Report:
    tmp.mkdir(parents=True, exist_ok=True)
    if template is not None:
        (tmp / "job.jsonnet").write_text(template)
    spec = tmp / "spec.yaml"
    spec.write_text(spec_text)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KALIPER_PROMETHEUS", "")
        mp.setenv("KALIPER_PUSHGATEWAY", "")
        url = f"file://{tmp / 'store'}"
        outcome = run_spec(load_spec(spec), url)
        return build_report(open_storage(url), outcome.experiment_id)


@pytest.fixture(scope="module")
def matmul(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    result = _run(tmp_path_factory.mktemp("matmul"), MATMUL_SPEC)
    page = report_html(result)
    path = tmp_path_factory.mktemp("matmul-page") / "report.html"
    path.write_text(page)
    return {"result": result, "html": page, "path": path}


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    result = _run(tmp_path_factory.mktemp("failing"), CRASH_SPEC, CRASH_TEMPLATE)
    page = report_html(result)
    path = tmp_path_factory.mktemp("failing-page") / "report.html"
    path.write_text(page)
    return {"result": result, "html": page, "path": path}


def plot_counts(page: str) -> dict[str, int]:
    kinds = re.findall(r'<svg data-kaliper-plot="([a-z]+)"', page)
    return {kind: kinds.count(kind) for kind in sorted(set(kinds))}


# ---------------------------------------------------------------------------------------------- contents


def test_matmul_page_has_every_plot_and_section(matmul: dict[str, Any]) -> None:
    page, result = matmul["html"], matmul["result"].result
    metrics = {name for t in result.trials for name in t.metrics}
    assert metrics >= {"gflops", "time_per_call"}
    # One distribution plot per metric, one scaling plot (matrix_size), CPU and memory resource bars.
    assert plot_counts(page) == {"distribution": len(metrics), "resources": 2, "scaling": 1}
    titled = re.findall(r'<svg data-kaliper-plot="[a-z]+"[^>]*>\n<title>[^<]+</title>', page)
    assert len(titled) == sum(plot_counts(page).values())
    for section in ("results", "distributions", "scaling", "comparison", "resources", "provenance", "method"):
        assert f'<h2 id="{section}">' in page, section
    assert '<h2 id="failures">' not in page
    assert result.experiment.id in page
    for t in result.trials:
        assert f"<h3>Trial {t.doc.id}</h3>" in page
        gflops = t.metrics["gflops"]
        assert f"{num(gflops.median)} [{num(gflops.ci_low)}, {num(gflops.ci_high)}]" in page
    assert "GFLOP/s" in page
    assert "nothing to compare with yet" in page  # the first experiment of its spec: no baseline
    assert "pytorch 2." in page and "torch" in page and "BLAS/OpenMP" in page
    assert "local-sampler" in page


def test_page_is_self_contained_and_deterministic(matmul: dict[str, Any], failing: dict[str, Any]) -> None:
    for case in (matmul, failing):
        page = case["html"]
        assert not EXTERNAL_REF.search(page), EXTERNAL_REF.search(page)
        assert "<link" not in page and "@import" not in page and "url(" not in page
        assert "default-src 'none'" in page
        assert report_html(case["result"]) == page


def test_failing_page_shows_reasons_and_escapes_hostile_strings(failing: dict[str, Any]) -> None:
    page, result = failing["html"], failing["result"].result
    crashed = [t for t in result.trials if t.doc.matrix_point["mode"] == HOSTILE_PARAM]
    assert len(crashed) == 1 and crashed[0].status == "failed"
    assert '<h2 id="failures">' in page
    assert page.count(f"<h3>{crashed[0].doc.id} repetition") == 2
    assert "exited with code 3" in page
    assert "PyTorchJobFailed" in page
    # The hostile strings appear only escaped: no markup from records reaches the page.
    assert HOSTILE_PARAM not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert HOSTILE_STDERR not in page and "&lt;img src=x onerror=alert(2)&gt;" in page
    assert page.count("<script>") == 1
    # Nothing numeric is swept: no scaling plot, and the page says why; the ok trial still has its plots.
    assert plot_counts(page)["distribution"] >= 1
    assert "scaling" not in plot_counts(page)
    assert "No numeric parameter is swept" in page


# ---------------------------------------------------------------------------------------------- chromium

# Chromium logs every console message, uncaught exception and CSP violation as a `CONSOLE` line; the
# page itself logs nothing, so any such line is a problem.
CONSOLE_PROBLEM = re.compile(r"CONSOLE|Uncaught|Refused to|Content Security Policy", re.IGNORECASE)


def chromium() -> str:
    binary = shutil.which("chromium")
    if binary is None:
        skip_or_fail("chromium not installed (Debian package chromium)")
    assert binary is not None
    return binary


def dump_dom(page: Path, tmp: Path) -> tuple[int, str, list[str]]:
    """Load the page headless; (exit code, dumped DOM, console lines that report a problem)."""
    home = tmp / "home"
    home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            chromium(),
            "--headless=new",
            "--disable-gpu",
            "--no-sandbox",
            "--enable-logging=stderr",
            "--v=0",
            f"--user-data-dir={tmp / 'profile'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(home)},
        check=False,
    )
    problems = [line for line in proc.stderr.splitlines() if CONSOLE_PROBLEM.search(line)]
    return proc.returncode, proc.stdout, problems


@pytest.mark.parametrize("case", ["matmul", "failing"])
def test_chromium_renders_the_page_without_console_errors(
    case: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    data = request.getfixturevalue(case)
    code, dom, problems = dump_dom(data["path"], tmp_path)
    assert code == 0, dom
    assert problems == []
    # The inline script ran (the CSP hash admits it) and every plot is in the live DOM.
    assert re.search(r'<body[^>]*data-kaliper-ready="1"', dom), dom[:2000]
    assert plot_counts(dom) == plot_counts(data["html"])
    assert sum(plot_counts(dom).values()) >= 1
    if case == "failing":
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
        assert "exited with code 3" in dom


def test_console_check_catches_script_errors(tmp_path: Path) -> None:
    """Negative controls: a script error, and a script the page's CSP refuses, are both caught."""
    broken = tmp_path / "broken.html"
    broken.write_text("<!DOCTYPE html><html><body><p>x</p><script>noSuchFunction();</script></body></html>")
    code, dom, problems = dump_dom(broken, tmp_path / "a")
    assert code == 0, dom
    assert any("noSuchFunction" in line and "Uncaught" in line for line in problems), problems

    injected = tmp_path / "injected.html"
    page = report_html_with_injection()
    injected.write_text(page)
    code, dom, problems = dump_dom(injected, tmp_path / "b")
    assert code == 0, dom
    assert 'data-kaliper-ready="1"' in dom  # the page's own script still ran
    assert "injected" not in dom.split("<body", 1)[0]
    assert any("Content Security Policy" in line for line in problems), problems


def report_html_with_injection() -> str:
    """A page with the report's own shell (CSP, script) and a foreign inline script spliced into its body."""
    return page_shell("injection test", ["<p>body</p><script>document.title='injected';</script>"])


def test_comparisons_show_ratios_cis_and_verdicts(matmul: dict[str, Any]) -> None:
    """The report's comparison tables (kaliper.reporter.comparison.baseline): here the experiment against itself."""
    report = matmul["result"]
    result = report.result
    exp = result.experiment.id
    same = compare_results(result, Side(exp, None), result, Side(exp, None))
    compared = ReportComparisons(ReportSpec(), baseline=exp, against_baseline=same)
    page = report_html(replace(report, comparisons=compared))
    section = page.split('<h2 id="comparison">', 1)[1].split("<h2 id=", 1)[0]
    for column in ("median A", "median B", "ratio B vs A [95% CI]", "p", "verdict", "why"):
        assert f"<th>{column}</th>" in section
    assert section.count('<span class="v-') == len(same.metrics) > 0  # one verdict per row
    assert section.count(">1.0000 [") == len(same.metrics)  # identical samples: a ratio of 1
    assert 'class="v-slower"' not in section and 'class="v-faster"' not in section

    refused = ReportComparisons(ReportSpec(), baseline_note="<script>alert(1)</script>")
    section = (
        report_html(replace(report, comparisons=refused))
        .split('<h2 id="comparison">', 1)[1]
        .split("<h2 id=", 1)[0]
    )
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section and "<script>alert" not in section
