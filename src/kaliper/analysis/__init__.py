"""Statistics and verdicts shared by the reporter, `kaliper compare` and `kaliper history`.

`terms` holds the names and default values (verdicts, directions, threshold, alpha, confidence) and
imports nothing, so the spec and the command line can use them without loading numpy or scipy;
`statistics` (one run, one trial) and `verdicts` (stack B against stack A) do the numerical work.
"""
