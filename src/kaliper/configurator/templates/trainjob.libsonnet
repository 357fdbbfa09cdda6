// A Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1, v2.3) for one trial: numNodes pods of
// numProcPerNode ranks each, on the runtime job.runtime names, every rank running `kaliper workload` (or
// the user's command) under torchrun. A queued job (job.queue) is created suspended for Kueue to admit.
local kaliper = import 'kaliper.libsonnet';

function(run, job, workload, params, sampling)
  {
    apiVersion: 'trainer.kubeflow.org/v1alpha1',
    kind: 'TrainJob',
    metadata: kaliper.metadata(run, job),
    spec: {
      runtimeRef: kaliper.runtimeRef(job),
      trainer: kaliper.trainer(run, job, workload, params, sampling),
      activeDeadlineSeconds: job.timeout_seconds,
      runtimePatches: [kaliper.runtimePatch(run, job)],
    } + (if kaliper.suspended(job) then { suspend: true } else {}),
  }
