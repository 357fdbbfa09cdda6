// Building blocks shared by Kaliper's job templates (and available to user templates:
// `local kaliper = import 'kaliper.libsonnet';`).
//
// Every template is a function of the same top-level arguments:
//   run:      {experiment, trial, storage, name, namespace, labels, env}
//             env: Kubernetes EnvVars computed by Kaliper (kaliper/configurator/podenv.py): KALIPER_PUSHGATEWAY
//             when monitoring.pushgateway is set; for s3:// storage KALIPER_S3_ENDPOINT, AWS_REGION and the
//             credentials as secretKeyRefs to the Secret s3.secret (never values). `env(run, job)` appends it.
//   job:      {kind, replicas, image, resources: {cpu, memory, gpu}, timeout_seconds,
//              service_account, node_selector, tolerations, success_policy,
//              runtime: {name, kind}, nodes, procs_per_node, queue, priority_class}
//             replicas: PyTorchJob/TFJob replica type → count; runtime, nodes, procs_per_node: a TrainJob's
//             runtimeRef, numNodes and numProcPerNode (kaliper.spec.job says which kind reads which);
//             queue, priority_class: Kueue's LocalQueue and WorkloadPriorityClass names, or null
//   workload: {name, framework, command, wrap, rules}: command is the user's argv for this trial (null for
//             a built-in workload), rules the extraction rules as JSON (kaliper.metrics.rules)
//   params:   the workload's parameters (defaults included)
//   sampling: {warmup, target_rel_ci, min_samples, max_samples, max_time_s, confidence}
// Kaliper's template worker provides the native function `kaliper.arg`: `pureArg` of a number, the same
// text computed in Python (kaliper/configurator/jsonnet_worker.py; std.format is most of a big sweep's
// rendering time). Where it is absent (the `jsonnet` CLI) `pureArg` itself is used. File-level locals are
// evaluated once per import, and std.primitiveEquals is a builtin where `==` is a jsonnet function.
local nativeArg = std.native('kaliper.arg');
local hasNative = std.primitiveEquals(std.type(nativeArg), 'function');
// `x == null`, the same for every x without calling std.equals
local isNull(x) = std.primitiveEquals(std.type(x), 'null');

{
  // A parameter as command-line text that reads back as the same value: integers without a fraction;
  // other numbers in 15 significant digits when that round-trips (0.95, not 0.94999999999999996),
  // else std.toString's 17 (always exact; std.format's %.17g is not). The same text as `pureArg`.
  arg(x)::
    local type = std.type(x);
    if std.primitiveEquals(type, 'string') then x
    else if hasNative && std.primitiveEquals(type, 'number') then nativeArg(x)
    else $.pureArg(x),

  pureArg(x)::
    if std.isNumber(x) && x == std.floor(x) && std.abs(x) < 1e15 then std.toString(x)
    else if std.isNumber(x) && std.abs(x) < 1e300 then
      local short = std.format('%.15g', x);
      if std.parseJson(short) == x then short else std.toString(x)
    else std.toString(x),

  paramArgs(params)::
    std.flattenArrays([['--param', k + '=' + $.arg(params[k])] for k in std.objectFields(params)]),

  samplingArgs(sampling):: [
    '--warmup', $.arg(sampling.warmup),
    '--target-rel-ci', $.arg(sampling.target_rel_ci),
    '--min-samples', $.arg(sampling.min_samples),
    '--max-samples', $.arg(sampling.max_samples),
    '--max-time', $.arg(sampling.max_time_s),
    '--confidence', $.arg(sampling.confidence),
  ],

  // Arguments of `kaliper workload`: every parameter and the sampling rule, explicit on the command
  // line so `kubectl describe pod` shows exactly what was measured.
  workloadArgs(workload, params, sampling)::
    ['workload', workload.name, '--framework', workload.framework]
    + $.paramArgs(params) + $.samplingArgs(sampling),

  // Arguments of `kaliper exec` wrapping the user's own `command` (workload.command, placeholders already
  // replaced): the extraction rules (how figures are read from its output), its parameters (for the
  // record) and the sampling rule (evaluated on the samples, never used to stop the job), then `--` and
  // the command itself.
  execArgs(workload, params, sampling, command=workload.command)::
    ['exec', '--rules', workload.rules, '--workload', workload.name, '--framework', workload.framework]
    + $.paramArgs(params) + $.samplingArgs(sampling) + ['--'] + command,

  // The main container's command and args: a built-in workload runs `kaliper workload`; the user's own
  // command runs under `kaliper exec` (wrap: true, the image contains Kaliper) or as it is (wrap: false:
  // any image; the launch step reads the figures from the pod logs afterwards).
  commandLine(workload, params, sampling)::
    local own = std.get(workload, 'command', null);
    if isNull(own) then { command: ['kaliper'], args: $.workloadArgs(workload, params, sampling) }
    else if std.get(workload, 'wrap', true) then { command: ['kaliper'], args: $.execArgs(workload, params, sampling) }
    else { command: own },

  // Replica identity comes from the labels the training operator puts on every pod.
  fromLabel(name, label):: {
    name: name,
    valueFrom: { fieldRef: { fieldPath: "metadata.labels['" + label + "']" } },
  },

  // Threads from the job's CPU resources ("2" → 2, "500m" → 1): without OMP_NUM_THREADS every replica
  // assumes all the node's cores, and co-located ranks oversubscribe them (2× slower measured here).
  cpuThreads(cpu)::
    local milli = std.endsWith(cpu, 'm');
    local n = std.parseJson(if milli then std.substr(cpu, 0, std.length(cpu) - 1) else cpu);
    std.max(1, std.floor(if milli then n / 1000 else n)),

  threadsEnv(job)::
    if isNull(job.resources.cpu) then []
    else [{ name: 'OMP_NUM_THREADS', value: std.toString($.cpuThreads(job.resources.cpu)) }],

  // A TrainJob's node runs procs_per_node ranks: each gets its share of the node's cores.
  threadsPerProc(job, procs)::
    if isNull(job.resources.cpu) then []
    else [{ name: 'OMP_NUM_THREADS', value: std.toString(std.max(1, std.floor($.cpuThreads(job.resources.cpu) / procs))) }],

  runEnv(run, job):: [
    { name: 'KALIPER_EXPERIMENT', value: run.experiment },
    { name: 'KALIPER_TRIAL', value: run.trial },
    { name: 'KALIPER_STORAGE', value: run.storage },
    { name: 'KALIPER_IMAGE', value: job.image },
    { name: 'PYTHONUNBUFFERED', value: '1' },
  ],

  env(run, job):: $.runEnv(run, job) + [
    $.fromLabel('KALIPER_REPLICA_TYPE', 'training.kubeflow.org/replica-type'),
    $.fromLabel('KALIPER_REPLICA_INDEX', 'training.kubeflow.org/replica-index'),
  ] + $.threadsEnv(job) + std.get(run, 'env', []),

  // A TrainJob's trainer env: every rank is a replica of type "Node"; its index is torchrun's RANK
  // (kaliper.results.protocol reads it when KALIPER_REPLICA_INDEX is absent), so none is set here.
  trainerEnv(run, job):: $.runEnv(run, job) + [
    { name: 'KALIPER_REPLICA_TYPE', value: 'Node' },
  ] + $.threadsPerProc(job, job.procs_per_node) + std.get(run, 'env', []),

  // Requests = limits: Guaranteed QoS, no CFS-throttling artefacts from a limit above the request.
  resources(job)::
    local r = job.resources;
    local amounts = (if !isNull(r.cpu) then { cpu: r.cpu } else {})
                    + (if !isNull(r.memory) then { memory: r.memory } else {})
                    + (if r.gpu > 0 then { 'nvidia.com/gpu': r.gpu } else {});
    if std.primitiveEquals(std.length(amounts), 0) then {} else { requests: amounts, limits: amounts },

  labels(run):: run.labels,

  // Kueue's labels on the job (never its pods): the LocalQueue it is submitted to and its
  // WorkloadPriorityClass. Kueue admits a queued job by unsuspending it (`suspended(job)`).
  queueLabels(job)::
    local queue = std.get(job, 'queue', null);
    local priority = std.get(job, 'priority_class', null);
    (if isNull(queue) then {} else { 'kueue.x-k8s.io/queue-name': queue })
    + (if isNull(priority) then {} else { 'kueue.x-k8s.io/priority-class': priority }),

  // A queued job is created suspended, so it starts only once Kueue admits it.
  suspended(job):: !isNull(std.get(job, 'queue', null)),

  metadata(run, job={}):: {
    name: run.name,
    labels: $.labels(run) + $.queueLabels(job),
  } + (if !isNull(run.namespace) then { namespace: run.namespace } else {}),

  // The benchmark runs as the images' non-root user (uid/gid 1000, as the step pods' image does), cannot
  // gain privileges, holds no capabilities and gets the runtime's default seccomp filter. The root
  // filesystem stays writable: workloads write to /tmp (generated image files) and framework caches.
  securityContext:: {
    runAsNonRoot: true,
    runAsUser: 1000,
    runAsGroup: 1000,
    allowPrivilegeEscalation: false,
    capabilities: { drop: ['ALL'] },
    seccompProfile: { type: 'RuntimeDefault' },
  },

  container(name, port, run, job, workload, params, sampling):: {
    name: name,
    image: job.image,
    imagePullPolicy: 'IfNotPresent',
  } + $.commandLine(workload, params, sampling) + {
    env: $.env(run, job),
    ports: [port],
    resources: $.resources(job),
    securityContext: $.securityContext,
  },

  podTemplate(container, run, job):: {
    metadata: { labels: $.labels(run) },
    spec: {
      containers: [container],
    } + (if !isNull(job.service_account) then { serviceAccountName: job.service_account } else {})
      + (if std.length(job.node_selector) > 0 then { nodeSelector: job.node_selector } else {})
      + (if std.length(job.tolerations) > 0 then { tolerations: job.tolerations } else {}),
  },

  // Benchmarks never restart: a retried replica would mix two processes into one measurement.
  replicaSpecs(container, run, job):: {
    [rtype]: {
      replicas: job.replicas[rtype],
      restartPolicy: 'Never',
      template: $.podTemplate(container, run, job),
    }
    for rtype in std.objectFields(job.replicas)
  },

  // cleanPodPolicy 'None' keeps every pod (and its logs) for inspection. A TFJob passes 'Running': its
  // PS (and PS-strategy workers) never exit by themselves and would hold the node's CPUs until the job
  // is deleted; completed pods and their logs stay either way.
  runPolicy(job, cleanPodPolicy='None'):: {
    backoffLimit: 0,
    activeDeadlineSeconds: job.timeout_seconds,
    cleanPodPolicy: cleanPodPolicy,
  } + (if $.suspended(job) then { suspend: true } else {}),

  // --- Kubeflow Trainer v2 (TrainJob) ---

  // The trainer container runs torchrun, which reads the PET_* variables the trainer's torch plugin
  // injects (numNodes, numProcPerNode, node rank, rank 0's address and port) and starts the node's ranks
  // with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT: `torchrun -m kaliper workload ...`
  // (or `exec ... -- <command>`). An unwrapped command (wrap: false) runs as it is: it starts torchrun
  // itself.
  trainerCommandLine(workload, params, sampling)::
    local line = $.commandLine(workload, params, sampling);
    if std.objectHas(line, 'args') then { command: ['torchrun'], args: ['-m', 'kaliper'] + line.args }
    else line,

  trainer(run, job, workload, params, sampling)::
    local resources = $.resources(job);
    { image: job.image }
    + $.trainerCommandLine(workload, params, sampling)
    + {
      env: $.trainerEnv(run, job),
      numNodes: job.nodes,
      numProcPerNode: job.procs_per_node,
    }
    + (if std.primitiveEquals(std.length(resources), 0) then {} else { resourcesPerNode: resources }),

  // Trainer v2.3 gives a TrainJob no pod template: pod labels, placement and the container's security
  // context reach the trainer's pods (replicated job "node", container "node") through Kaliper's own
  // runtimePatches entry, keyed by its manager. Env cannot go there for container "node" (it is the
  // trainer's: spec.trainer.env).
  runtimePatch(run, job):: {
    manager: 'kaliper.dev/kaliper',
    trainingRuntimeSpec: { template: { spec: { replicatedJobs: [{
      name: 'node',
      template: { spec: { template: {
        metadata: { labels: $.labels(run) },
        spec: {
          containers: [{ name: 'node', securityContext: $.securityContext }],
        } + (if !isNull(job.service_account) then { serviceAccountName: job.service_account } else {})
          + (if std.length(job.node_selector) > 0 then { nodeSelector: job.node_selector } else {})
          + (if std.length(job.tolerations) > 0 then { tolerations: job.tolerations } else {}),
      } } },
    }] } } },
  },

  runtimeRef(job):: {
    name: job.runtime.name,
    kind: job.runtime.kind,
    apiGroup: 'trainer.kubeflow.org',
  },
}
