// A Kubeflow PyTorchJob (kubeflow.org/v1) for one trial: Master (+ Workers) running `kaliper workload`.
local kaliper = import 'kaliper.libsonnet';

function(run, job, workload, params, sampling)
  local container = kaliper.container(
    'pytorch', { name: 'pytorchjob-port', containerPort: 23456 }, run, job, workload, params, sampling
  );
  {
    apiVersion: 'kubeflow.org/v1',
    kind: 'PyTorchJob',
    metadata: kaliper.metadata(run, job),
    spec: {
      runPolicy: kaliper.runPolicy(job),
      pytorchReplicaSpecs: kaliper.replicaSpecs(container, run, job),
    },
  }
