"""Building: the report object (`report.Report`) from a loaded experiment and its comparisons, and what
every writer shares of it: summary.json's document, the comparison tables, the GPU, load sweep and
interference sections, how numbers and untrusted text are written (`formatting`).
"""
