"""Running the runs of an experiment and recording what each left: the backends registered by name
(`executor`: the protocol, its result, the registry; `loop`: the one run loop), the local-process backend
(`local.job`: a rendered job manifest run as processes with the training operator's environment,
success, failure and deadline rules; `local.runner`), the Slurm backend (`slurm`), the Kubernetes-job
backend (`kubernetes.launch`, `kubernetes.api`, `kubernetes.jobstate`, `kubernetes.logrecords`; the job
object's rules are kaliper.jobs.objects), what a run saw of its neighbours (`neighbours.environment`,
`cluster_environment`, `neighbours.preflight`, `neighbours.calibration`), records built from logs
(`fromlogs`), and `kaliper trace record` (`tracing.record`, `tracing.judgement`). What drives them, the
configure → execute → report pipeline, sits above, in kaliper.application."""
