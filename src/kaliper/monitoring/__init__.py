"""Live metrics to a Pushgateway while a replica runs; Prometheus queries for a run's window afterwards."""
