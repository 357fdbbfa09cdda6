"""The application layer: what a command does, from the parts it drives, above all of them.

`kaliper run` (`pipeline.run_spec`: configure → execute every run with the spec's backend → report, the
local spool under it all) and the report as every command writes it (`reporting.report_experiment`: the
runs' documents from Prometheus stored, then the report, under the process settings a large report wants).
It imports the backends and the reporter directly: nothing below it is handed a callback to reach up.
"""
