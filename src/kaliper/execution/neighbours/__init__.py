"""What a local run saw of its neighbours: the calibration probe's history on this machine
(`calibration`), the signals and probe around one run and its verdict (`run_monitor`), and the pre-flight
check that the machine is quiet enough before the first run (`preflight`). A cluster run's view, asked of
Prometheus, is kaliper.execution.cluster_environment."""
