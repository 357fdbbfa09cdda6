"""Grafana dashboards for Kaliper, generated as code with grafana-foundation-sdk (targets Grafana 11.6).

- "Kaliper / Live run" (uid `kaliper-live-run`): the live metrics of running replicas
  (`kaliper.monitoring.push`), the local process exporter (`kaliper.monitoring.sampler`) and the
  cluster equivalents (cAdvisor joined with `kube_pod_labels`, DCGM), as in `kaliper.monitoring.prometheus`.
- "Kaliper / Results" (uid `kaliper-results`): the summary metrics the reporter pushes after each report
  (names in `kaliper.monitoring.metrics`).

`kaliper dashboards [--out DIR]` writes them (`generate.dashboard_files`). Importing this package does not
import the SDK; only building does.
"""
