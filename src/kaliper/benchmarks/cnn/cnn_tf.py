"""cnn-train / cnn-infer in TensorFlow: one sample = one step (forward, loss, gradients, SGD update; or
forward only) in a tf.function, timed with perf_counter_ns until the step's scalar (the loss, or the sum
of the logits) has been fetched to the host. One untimed step first traces the functions
(`derived.first_step_s`), so even a warm-up of 0 times no tracing.

Keras is tf_keras everywhere (models_tf.py says why). `device: cpu` hides every GPU from TensorFlow
(strategies would take them); `cuda` fails clearly when TensorFlow sees none.

Input: `synthetic` is one fixed batch kept on the device; `files` is a tf.data pipeline over the
image files (models_tf.ImageFiles). Each step times the wait for `next(iterator)` apart from the step
itself: images_per_s = batch_size / (data_wait + compute), compute_images_per_s = batch_size / compute,
step_time = data_wait + compute, data_wait_time (files); derived.data_wait_fraction = Σwait / Σstep.

How the run is distributed comes only from TF_CONFIG, as the TFJob operator injects it, so one manifest
runs the same locally and on a cluster:

- no TF_CONFIG, or a one-task cluster: one process, no distribution strategy.
- a cluster with `ps` tasks: ParameterServerStrategy. The `chief` is the coordinator (ClusterCoordinator,
  per-worker datasets, `schedule` + `join`); one sample = as many steps scheduled as there are workers,
  then `join` and a fetch of the last result; images_per_s_total = num_workers × batch_size / t. The
  workers run the input pipelines, so the chief cannot time the input wait (data_wait_fraction is null).
  `worker` and `ps` tasks only serve (`tf.distribute.Server(...).join()`) until they are stopped: locally
  by the executor once the chief has succeeded, on a cluster when the job is cleaned up. Only the chief
  writes a result record for a PS job. With `data: files` the workers generate the same deterministic
  files at the same temp path as the chief (or read `data_dir`, which must then be a shared volume).
- otherwise (workers, and optionally a chief): MultiWorkerMirroredStrategy with RING collectives. Every
  task trains on its own batch (global batch = batch_size × tasks; per-task synthetic batches or file
  shards) and writes its own record; images_per_s_total = global batch / t. The leader (the chief, else
  worker 0) decides when sampling stops and tells the others through a one-value all-reduce before each
  step (outside the timer), so every task runs the same steps and records the leader's stop reason. At
  the end an all-gather of each task's SHA-256 of its weights says whether they are identical
  (`params_in_sync`). The leader waits at exit (up to PEER_EXIT_WAIT_S) until the other tasks' servers
  are gone, so none is stopped before its record is stored (the job succeeds when the leader exits).

Model FLOPs: one image's forward pass counted from the Keras layers' shapes (models_tf,
`forward_flops_per_image`: the formulas torch's FlopCounterMode uses); `model_tflops` = (3 × for training)
that count × images_per_s of this replica, and `pct_of_peak` against the GPU TensorFlow names
(`get_device_details`), none on a CPU. The models run NHWC (`derived.data_format`); `compile` and
`memory_format` are PyTorch's parameters, refused here unless at their defaults (catalog).
"""

from __future__ import annotations

import atexit
import os
import time
from collections.abc import Callable
from typing import Any

from kaliper import settings
from kaliper.benchmarks.cnn.imagefiles import ensure_image_files
from kaliper.benchmarks.cnn.models_tf import (
    OPTIMIZER,
    ClusterConfig,
    ImageFiles,
    build_model,
    load_keras,
    make_optimizer,
    model_flops,
    params_digest,
    replica_step,
    serve,
    set_precision,
    synthetic_batch,
    wait_for_peers,
)
from kaliper.benchmarks.measurement import Measurement, MetricDef
from kaliper.benchmarks.peaks import with_peak
from kaliper.benchmarks.tf_support import (
    import_tensorflow,
    tf_build_info,
    tf_device,
    tf_gpus,
    tf_peak_inputs,
    tf_threads,
)
from kaliper.errors import WorkloadError
from kaliper.metrics.sampling import SampleSet, SamplingRule, collect


def run_train(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    return _run(params, rule, train=True)


def run_infer(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    return _run(params, rule, train=False)


def _run(params: dict[str, Any], rule: SamplingRule, train: bool) -> Measurement:
    config = ClusterConfig.from_env()
    config.check()
    os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before TensorFlow is imported (tf_threads imports it)
    threads = tf_threads(int(params["threads"]))  # before the first op: it creates the runtime
    tf = import_tensorflow()
    device = tf_device(str(params["device"]))
    if device == "/CPU:0":  # strategies take every visible GPU: device=cpu must hide them
        tf.config.set_visible_devices([], "GPU")
    keras = load_keras()
    if config.mode == "ps" and config.task_type in ("worker", "ps"):
        if params["data"] == "files" and config.task_type == "worker":
            ensure_image_files(params)  # the chief's file names: deterministic, so the same here
        serve(tf, config, threads)  # does not return
    keras.backend.clear_session()
    policy = set_precision(keras, str(params["precision"]))
    run = _Run(tf, keras, params, config, train, policy, device)
    if config.mode == "ps":
        samples, metrics, derived = run.parameter_server(rule)
    elif config.mode == "multiworker":
        samples, metrics, derived = run.multi_worker(rule)
    else:
        samples, metrics, derived = run.single(rule)
    metrics, flops = model_flops(metrics, run.model, train)
    metrics, peak_info = with_peak(
        metrics,
        "model_tflops",
        1e12,
        *tf_peak_inputs(device, "bfloat16" if params["precision"] == "bf16" else "float32"),
    )
    build = tf_build_info()
    build["tf_keras"] = keras.__version__
    build["TF_USE_LEGACY_KERAS"] = settings.current()[settings.TF_USE_LEGACY_KERAS]
    return Measurement(
        samples=samples,
        calls_per_sample=run.steps_per_sample,
        metrics=metrics,
        framework="tensorflow",
        framework_version=str(tf.__version__),
        framework_build=build,
        threads=threads,
        gpus=tf_gpus(),
        effective_params={
            "keras": f"tf_keras {keras.__version__}",
            "dtype_policy": policy,
            "optimizer": OPTIMIZER if train else None,
            "steps_per_sample": run.steps_per_sample,
            "sync": run.sync,
        },
        derived={
            "tf_config": config.raw,
            **run.info,
            **derived,
            "data_format": DATA_FORMAT,
            "flops": flops,
            **peak_info,
        },
    )


DATA_FORMAT = "NHWC (Keras data_format channels_last, its default; memory_format is torch's setting)"


class _Run:
    """One measurement: the model, the step and the input, for one of the three modes."""

    def __init__(
        self,
        tf: Any,
        keras: Any,
        params: dict[str, Any],
        config: ClusterConfig,
        train: bool,
        policy: str,
        device: str,
    ) -> None:
        self.tf, self.keras, self.params, self.config, self.train = tf, keras, params, config, train
        self.device = device
        self.batch = int(params["batch_size"])
        self.size = int(params["image_size"])
        self.classes = int(params["num_classes"])
        self.policy = policy
        self.files: ImageFiles | None = None
        if params["data"] == "files":
            self.files = ImageFiles(ensure_image_files(params))
        self.steps_per_sample = 1
        self.sync = "host fetch of the step's loss (.numpy())" if train else "host fetch of sum(logits)"
        self.info: dict[str, Any] = {}  # run facts for the record's `derived`
        self.waits: list[int] = []
        self.model: Any = None

    def _model(self, global_batch: int) -> Callable[[Any, Any], Any]:
        self.model = build_model(self.keras, str(self.params["model"]), self.size, self.classes)
        optimizer = make_optimizer(self.keras) if self.train else None
        self.info["model_params"] = sum(int(v.shape.num_elements()) for v in self.model.trainable_variables)
        step: Callable[[Any, Any], Any] = replica_step(
            self.tf, self.keras, self.model, optimizer, self.train, global_batch
        )
        return step

    def _dataset(self, batch: int, shards: int = 1, shard: int = 0) -> Any:
        assert self.files is not None
        return self.files.dataset(self.tf, self.size, batch, int(self.params["data_workers"]), shards, shard)

    def _prime(self, step: Callable[[], int]) -> None:
        """One untimed step first: it traces the tf.function(s), so a warm-up of 0 times no tracing."""
        start = time.perf_counter_ns()
        step()
        self.info["first_step_s"] = (time.perf_counter_ns() - start) / 1e9
        self.waits.clear()

    def _stepper(self, step: Callable[[Any, Any], Any], next_batch: Callable[[], Any]) -> Callable[[], int]:
        """One timed step: wait for the next batch (timed apart, into self.waits), step, fetch."""

        def measure() -> int:
            start = time.perf_counter_ns()
            images, labels = next_batch()
            ready = time.perf_counter_ns()
            step(images, labels).numpy()  # the host fetch: the step's work is done when it returns
            end = time.perf_counter_ns()
            self.waits.append(ready - start)
            return end - start

        return measure

    def _input(self, dataset: Callable[[], Any], device: str, seed: int = 0) -> Callable[[], Any]:
        """The next batch: from the file pipeline's iterator (on the host), or the same synthetic batch,
        kept on `device`, every step (`seed`: each multi-worker task gets its own, so only the gradient
        all-reduce keeps the weights equal)."""
        if self.files is not None:
            iterator = iter(dataset())
            return lambda: next(iterator)
        with self.tf.device(device):
            fixed = synthetic_batch(self.tf, self.batch, self.size, self.classes, seed)
        return lambda: fixed

    # ------------------------------------------------------------------------------------ single

    def single(self, rule: SamplingRule) -> tuple[SampleSet, dict[str, MetricDef], dict[str, Any]]:
        tf, device = self.tf, self.device
        next_batch = self._input(lambda: self._dataset(self.batch), device)
        with tf.device(device):
            replica_fn = self._model(self.batch)

        def step_fn(images: Any, labels: Any) -> Any:
            with tf.device(device):
                return replica_fn(images, labels)

        measure = self._stepper(tf.function(step_fn), next_batch)
        self._prime(measure)
        samples = collect(measure, rule)
        metrics, derived = self._measured(samples, 1)
        return samples, metrics, {"strategy": "none", "num_workers": 1, "tf_device": device, **derived}

    # ------------------------------------------------------------------------------------ multi-worker

    def multi_worker(self, rule: SamplingRule) -> tuple[SampleSet, dict[str, MetricDef], dict[str, Any]]:
        tf = self.tf
        implementation = tf.distribute.experimental.CommunicationImplementation.RING
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=implementation
            )
        )
        trainers = self.config.trainers
        workers = len(trainers)
        me = (self.config.task_type, self.config.task_index)
        rank = trainers.index(me)
        global_batch = self.batch * workers
        with strategy.scope():
            replica_fn = self._model(global_batch)

        def local(value: Any) -> Any:
            return strategy.experimental_local_results(value)[0]

        def step_fn(images: Any, labels: Any) -> Any:
            return local(strategy.run(replica_fn, args=(images, labels)))

        step = tf.function(step_fn, autograph=False)

        # tf.identity: a tensor on this replica's device (an argument has none: "destinations can not be empty")
        def replica_sum(value: Any) -> Any:
            return tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, tf.identity(value)
            )

        def replica_gather(value: Any) -> Any:
            return tf.distribute.get_replica_context().all_gather(tf.identity(value), axis=0)

        def all_reduce_fn(value: Any) -> Any:
            return local(strategy.run(replica_sum, args=(value,)))

        all_reduce = tf.function(all_reduce_fn, autograph=False)

        def all_gather_fn(value: Any) -> Any:
            return local(strategy.run(replica_gather, args=(value,)))

        all_gather = tf.function(all_gather_fn, autograph=False)

        def dataset() -> Any:
            per_replica = self.batch

            def fn(ctx: Any) -> Any:
                return self._dataset(per_replica, ctx.num_input_pipelines, ctx.input_pipeline_id)

            return strategy.distribute_datasets_from_function(fn)

        measure = self._stepper(step, self._input(dataset, strategy.extended.worker_devices[0], seed=rank))
        self._prime(measure)
        leader = rank == 0

        def agree(decision: int) -> int:
            """The leader's decision on every worker (the others contribute 0 to the sum)."""
            return round(float(all_reduce(tf.constant(float(decision) if leader else 0.0)).numpy()))

        samples = collect(measure, rule, agree=agree)
        if leader:
            atexit.register(wait_for_peers, self.config, me)

        digest = params_digest(self.model.trainable_variables)
        gathered = all_gather(tf.constant([float(b) for b in digest[:8]], tf.float32)).numpy()
        rows = gathered.reshape(workers, 8)
        in_sync = bool((rows == rows[0]).all())
        derived = {
            "strategy": "MultiWorkerMirroredStrategy",
            "communication": "RING",
            "num_workers": workers,
            "rank": rank,
            "leader": leader,
            "task": {"type": self.config.task_type, "index": self.config.task_index},
            "global_batch_size": global_batch,
            "params_in_sync": in_sync,
            "params_sha256": digest.hex(),
        }
        metrics, measured = self._measured(samples, workers)
        return samples, metrics, {**derived, **measured}

    # ------------------------------------------------------------------------------------ parameter server

    def parameter_server(self, rule: SamplingRule) -> tuple[SampleSet, dict[str, MetricDef], dict[str, Any]]:
        tf = self.tf
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        strategy = tf.distribute.ParameterServerStrategy(resolver)
        workers = len(self.config.cluster["worker"])
        with strategy.scope():
            replica_fn = self._model(self.batch)  # each scheduled step is its own asynchronous batch
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

        def dataset_fn(ctx: Any) -> Any:
            if self.files is not None:
                return self._dataset(self.batch)
            return tf.data.Dataset.from_tensors(
                synthetic_batch(tf, self.batch, self.size, self.classes)
            ).repeat()

        def per_worker_dataset_fn() -> Any:
            return strategy.distribute_datasets_from_function(dataset_fn)

        per_worker_dataset = tf.function(per_worker_dataset_fn, autograph=False)

        iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset))

        def step_fn(iterator: Any) -> Any:
            images, labels = next(iterator)
            return strategy.run(replica_fn, args=(images, labels))

        step = tf.function(step_fn, autograph=False)

        self.steps_per_sample = workers
        self.sync = (
            f"{workers} steps scheduled (as many as workers), coordinator.join(), fetch of the last result"
        )

        def measure() -> int:
            start = time.perf_counter_ns()
            results = [coordinator.schedule(step, args=(iterator,)) for _ in range(workers)]
            coordinator.join()
            results[-1].fetch()
            return time.perf_counter_ns() - start

        self._prime(measure)
        samples = collect(measure, rule)
        images_per_sample = workers * self.batch
        metrics = {
            "images_per_s": MetricDef(
                "images/s",
                "more_is_better",
                "batch_size / t (per worker: a sample is as many steps as workers)",
                from_ns=lambda ns: self.batch * 1e9 / ns,
            ),
            "images_per_s_total": MetricDef(
                "images/s",
                "more_is_better",
                "num_workers * batch_size / t (all workers)",
                from_ns=lambda ns: images_per_sample * 1e9 / ns,
            ),
            "step_time": MetricDef(
                "s", "less_is_better", "t (as many steps as workers, then join)", from_ns=lambda ns: ns / 1e9
            ),
        }
        derived = {
            "strategy": "ParameterServerStrategy",
            "num_workers": workers,
            "num_ps": len(self.config.cluster["ps"]),
            "task": {"type": self.config.task_type, "index": self.config.task_index},
            "batch_size": self.batch,
            "global_batch_size": images_per_sample,
            "timed_steps": len(samples.timed_ns) * workers,
            "data_wait_fraction": None,  # the input pipelines run on the workers, out of the chief's sight
            **self._data_info(),
        }
        return samples, metrics, derived

    # ------------------------------------------------------------------------------------ metrics

    def timed_waits(self, samples: SampleSet) -> list[int]:
        """The input wait of each timed sample (self.waits holds warm-up and timed samples, in order)."""
        waits = self.waits[len(samples.warmup_ns) :]
        if len(waits) != len(samples.timed_ns):
            raise WorkloadError(f"internal: {len(waits)} input waits for {len(samples.timed_ns)} samples")
        return waits

    def _measured(self, samples: SampleSet, workers: int) -> tuple[dict[str, MetricDef], dict[str, Any]]:
        """Per-step metrics and run-level figures of a mode that times input wait and step apart."""
        batch = self.batch
        waits = self.timed_waits(samples)
        compute = [max(ns - wait, 1) for ns, wait in zip(samples.timed_ns, waits, strict=True)]
        metrics = {
            "images_per_s": MetricDef(
                "images/s",
                "more_is_better",
                "batch_size / (data_wait + compute) per step (effective throughput of this replica)",
                from_ns=lambda ns: batch * 1e9 / ns,
            ),
            "compute_images_per_s": MetricDef(
                "images/s",
                "more_is_better",
                "batch_size / compute per step (compute throughput: without the wait for input)",
                values=[batch * 1e9 / ns for ns in compute],
            ),
            "step_time": MetricDef(
                "s", "less_is_better", "data_wait + compute per step", from_ns=lambda ns: ns / 1e9
            ),
        }
        if self.files is not None:
            metrics["data_wait_time"] = MetricDef(
                "s",
                "less_is_better",
                "wait for next(iterator) of the tf.data pipeline, per step",
                values=[ns / 1e9 for ns in waits],
            )
        if workers > 1:
            metrics["images_per_s_total"] = MetricDef(
                "images/s",
                "more_is_better",
                "batch_size * num_workers / (data_wait + compute) per step (the global batch: all "
                "workers step together)",
                from_ns=lambda ns: batch * workers * 1e9 / ns,
            )
        n, total = len(compute), sum(samples.timed_ns)
        derived: dict[str, Any] = {
            "batch_size": batch,
            "timed_steps": n,
            "data_wait_fraction": sum(waits) / total,
            "effective_images_per_s": batch * n * 1e9 / total,
            "compute_images_per_s": batch * n * 1e9 / sum(compute),
            "formulas": {
                "data_wait_fraction": "sum(data_wait) / sum(data_wait + compute) over the timed steps",
                "effective_images_per_s": "timed_steps * batch_size / sum(data_wait + compute)",
                "compute_images_per_s": "timed_steps * batch_size / sum(compute)",
            },
            **self._data_info(),
        }
        return metrics, derived

    def _data_info(self) -> dict[str, Any]:
        if self.files is None:
            return {"data": {"source": "synthetic"}}
        return {
            "data": {
                "source": "files",
                "data_dir": str(self.files.directory),
                "files": len(self.files.paths),
                "pipeline": "tf.data: read_file, decode_raw, normalise (map, num_parallel_calls="
                f"{int(self.params['data_workers']) or 'AUTOTUNE'}), batch, prefetch(AUTOTUNE)",
            }
        }
