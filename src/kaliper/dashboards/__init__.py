"""Grafana dashboards for Kaliper, generated as code with grafana-foundation-sdk (targets Grafana 11.6).

- "Kaliper / Live run" (uid `kaliper-live-run`): the live metrics of running replicas
  (`kaliper.monitoring.push`), the local process exporter (`kaliper.monitoring.sampler`) and the
  cluster equivalents (cAdvisor joined with `kube_pod_labels`), as in `kaliper.monitoring.prometheus`;
  a GPU row (utilisation, power, SM clock, temperature, memory) with the run's local `kaliper_gpu_*`
  series and the DCGM series of its pods' GPUs.
- "Kaliper / Results" (uid `kaliper-results`): the summary metrics the reporter pushes after each report
  (names in `kaliper.monitoring.metrics`), and the same GPU row for the selected experiments' runs.

`kaliper dashboards [--out DIR]` writes them (`generate.dashboard_files`). Importing this package does not
import the SDK; only building does.
"""
