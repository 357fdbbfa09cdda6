"""What the tests share, imported as `tests.support.<module>` (tests/README.md lists each module).

Test data and real services, not mocks of Kaliper's code: experiments made by Kaliper's own configurator
and runtime (synthetic, wide_report), recorded GPU readings (nvml_replay), the upstream Kubernetes schemas
(k8s_schemas), a kubeconfig naming a loopback API server (kubeconfig), real Prometheus/Pushgateway/S3 servers on free ports (prom_services, s3_server), a TCP
proxy that breaks connections on cue (tcp_proxy), a two-rank DDP PyTorchJob run by `kaliper run` (ddp), readers of the reports (report_markup, report_runs),
the repository's paths (paths), the skip-or-fail rule for missing services (services) and the CLI
runner's type (cli).
"""
