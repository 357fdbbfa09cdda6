"""What runs inside a user's process or beside it: `kaliper exec` (the wrapper, its record),
`kaliper.emit`, and the trace-recording hooks (`kaliper.trace_steps`, `autostep`)."""
