"""Running the runs of an experiment and recording what each left: the local-process backend
(`local.job`: a rendered job manifest run as processes with the training operator's environment,
success, failure and deadline rules; `local.runner`: every trial × repetition, stored), the
Kubernetes-job backend (`kubernetes.launch`, `kubernetes.api`, `kubernetes.jobstate`,
`kubernetes.logrecords`; the job object's rules are kaliper.jobs.objects), what a run saw of its
neighbours (`neighbours.environment`, `cluster_environment`, `neighbours.preflight`,
`neighbours.calibration`), records built from logs (`fromlogs`), and `kaliper trace record`
(`tracing.record`, `tracing.judgement`)."""

from collections.abc import Callable

from kaliper.storage import Storage

# What the caller does after each run of a trial is stored (storage, experiment id, trial id): the
# reporter's samples file, wired in by the entry points (kaliper.execution.pipeline, kaliper.cli.steps), so that
# this layer never imports the reporter above it.
AfterRun = Callable[[Storage, str, str], object]
