"""Names and default values of the analysis, free of dependencies.

The spec (`report:` defaults), `kaliper --help` and the Pushgateway's metric names read these; importing
`kaliper.analysis.statistics` for them would load numpy and scipy (250 ms) for two numbers.
"""

from __future__ import annotations

from typing import Final, Literal

DEFAULT_CONFIDENCE: Final = 0.95
DEFAULT_THRESHOLD: Final = 0.03  # practical threshold δ of a comparison (methodology 3b)
DEFAULT_TARGET_REL_CI: Final = (
    DEFAULT_THRESHOLD / 2
)  # a trial CI narrow enough to decide at δ (methodology 3b)
DEFAULT_ALPHA: Final = 0.05  # significance level of the Mann-Whitney test, and the BH false discovery rate q
# Quiet runs a side needs for a verdict other than inconclusive (spec `sampling.interference.min_quiet_runs`).
DEFAULT_MIN_QUIET_RUNS: Final = 2

Direction = Literal["more_is_better", "less_is_better"]
DIRECTIONS: Final[tuple[Direction, ...]] = ("more_is_better", "less_is_better")
Verdict = Literal["faster", "slower", "equivalent", "inconclusive"]
VERDICTS: Final[tuple[Verdict, ...]] = ("faster", "slower", "equivalent", "inconclusive")
