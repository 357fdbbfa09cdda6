"""The binomial law behind the median's distribution-free confidence interval, without scipy.

Every workload process computes the interval's ranks as it samples (the stopping rule), and importing
scipy.special for its binomial CDF cost each of them ~0.4 CPU-s. The reporter's bootstrap still uses
scipy (`statistics._median_rank_table`), where the import is paid once per report.
"""

from __future__ import annotations

import math

import numpy as np

# Up to this n, P(K ≤ k) for K ~ Binomial(n, 1/2) is summed in exact integers; above it, in log space.
EXACT_RANKS_UP_TO = 2048


def lower_median_rank(n: int, alpha: float) -> int:
    """The number of k ≥ 0 with P(K ≤ k) ≤ α/2, K ~ Binomial(n, 1/2) (0 when there is none).

    Small n are exact (integers: Σ C(n, j) ≤ α/2 · 2ⁿ, α read exactly as the binary
    fraction it is); large n sum the log-pmf (lgamma) with logaddexp, to ~1e-10 relative, against a
    crossing whose neighbours differ by the pmf (≥ 1e-3 relative there). Both gave what scipy's
    `bdtr(k, n, 0.5) <= α/2` gives for every n up to 2,100 and every 997th n up to 200,000, at
    confidences 0.5 to 0.999; `tests/unit/analysis/test_median_ranks.py` keeps a part of that check.
    """
    if n <= EXACT_RANKS_UP_TO:
        num, den = alpha.as_integer_ratio()
        bound = num << n  # α/2 · 2ⁿ · 2·den, against Σ C(n, j) · 2·den
        term, total, count = 1, 0, 0
        for k in range(n // 2 + 1):
            total += term
            if 2 * total * den > bound:
                break
            count += 1
            term = term * (n - k) // (k + 1)
        return count
    log_pmf = (
        math.lgamma(n + 1)
        - n * math.log(2.0)
        - np.array([math.lgamma(k + 1) + math.lgamma(n - k + 1) for k in range(n // 2 + 1)])
    )
    log_cdf = np.logaddexp.accumulate(log_pmf)
    return int(np.count_nonzero(log_cdf <= math.log(alpha / 2.0)))
