"""Comparison: loaded experiments against each other (`compare`, kept by `compare_cache`), a report's
baseline and stack comparisons (`baseline`, `stackdiff`), and results over time (`history`).

Above loading, below building: it computes verdicts and figures; how a report words them is building's.
"""
