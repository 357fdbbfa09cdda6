// A Kubeflow TFJob (kubeflow.org/v1) for one trial. The container must be named `tensorflow`: the
// operator injects TF_CONFIG only there (and only when the job has more than one replica).
local kaliper = import 'kaliper.libsonnet';

function(run, job, workload, params, sampling)
  local container = kaliper.container(
    'tensorflow', { name: 'tfjob-port', containerPort: 2222 }, run, job, workload, params, sampling
  );
  {
    apiVersion: 'kubeflow.org/v1',
    kind: 'TFJob',
    metadata: kaliper.metadata(run, job),
    spec: {
      runPolicy: kaliper.runPolicy(job, 'Running'),
      tfReplicaSpecs: kaliper.replicaSpecs(container, run, job),
    } + (if job.success_policy != '' then { successPolicy: job.success_policy } else {}),
  }
