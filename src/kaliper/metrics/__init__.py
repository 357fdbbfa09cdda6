"""Reading figures out of a benchmark's output: extraction rules, streaming extraction, the sampling rule,
a replica's verdict. The lowest layer above `analysis`: stdlib, numpy and kaliper.analysis only."""
