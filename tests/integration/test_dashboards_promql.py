"""Every PromQL expression of the Grafana dashboards (panels and variable queries) passes `promtool`.

Grafana's variables are substituted first, as Grafana would: `$__rate_interval` -> 1m, `$__interval` ->
30s, a dashboard variable -> a concrete value inside its `=~"..."` matcher. A `label_values(SELECTOR,
label)` variable query is checked through its selector.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kaliper.dashboards.build import LIVE_UID, RESULTS_UID
from kaliper.dashboards.generate import DASHBOARD_DIR, dashboard_files
from tests.support.prom_services import find_binary

# Values for Grafana's variables: built-ins as Grafana renders them, dashboard variables as a selection
# ("All" is `.*`, several values become an alternation).
VALUES = {
    "__rate_interval": "1m",
    "__interval": "30s",
    "__range": "1h",
    "experiment": "quickstart-20250101-000000",
    "trial": "t000|t001",
    "replica": ".*",
    "spec": "quickstart",
    "metric": "gflops",
    "fingerprint": "0123456789ab",
}
VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
LABEL_VALUES = re.compile(r"label_values\((?P<selector>.+),\s*(?P<label>[a-zA-Z_]\w*)\)\s*")


def substitute(expr: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in VALUES, f"unknown Grafana variable ${name} in {expr}"
        return VALUES[name]

    return VARIABLE.sub(value, expr)


def promql_of(uid: str) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable of one dashboard."""
    board: dict[str, Any] = json.loads(dashboard_files()[f"{DASHBOARD_DIR}/{uid}.json"])
    found: list[tuple[str, str]] = []
    for panel in board["panels"]:
        for nested in [panel, *(panel.get("panels") or [])]:
            for target in nested.get("targets") or []:
                found.append((f"{nested['title']} {target['refId']}", substitute(target["expr"])))
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = LABEL_VALUES.fullmatch(variable["query"])
        assert match, f"variable {variable['name']}: expected label_values(SELECTOR, label)"
        found.append((f"variable {variable['name']}", substitute(match["selector"])))
    return found


def check_rules(promtool: str, path: Path, exprs: list[str]) -> subprocess.CompletedProcess[str]:
    rules = [{"record": f"kaliper:dashboard:check_{i}", "expr": expr} for i, expr in enumerate(exprs)]
    path.write_text(yaml.safe_dump({"groups": [{"name": "kaliper-dashboards", "rules": rules}]}))
    return subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("uid", [LIVE_UID, RESULTS_UID])
def test_every_dashboard_promql_passes_promtool(uid: str, tmp_path: Path) -> None:
    promtool = find_binary("promtool")
    found = promql_of(uid)
    assert len(found) >= 10
    for where, expr in found:
        assert "$" not in expr, f"{where}: unsubstituted variable in {expr}"
    result = check_rules(promtool, tmp_path / "rules.yml", [expr for _, expr in found])
    output = result.stdout + result.stderr
    assert result.returncode == 0, output + "\n" + "\n".join(f"{w}: {e}" for w, e in found)
    assert f"SUCCESS: {len(found)} rules found" in output


def test_promtool_check_is_not_vacuous(tmp_path: Path) -> None:
    promtool = find_binary("promtool")
    # An unsubstituted Grafana macro is invalid PromQL, and so is a broken expression.
    for bad in ("rate(kaliper_samples_total[$__rate_interval])", "sum(kaliper_throughput"):
        assert check_rules(promtool, tmp_path / "rules.yml", [bad]).returncode != 0, bad
