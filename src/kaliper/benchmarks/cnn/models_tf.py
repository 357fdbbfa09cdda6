"""The parts of the TensorFlow CNN workloads (cnn_tf.py): models, steps, input pipelines, and the
TF_CONFIG cluster plumbing (modes, PS/worker servers, the multi-worker stop agreement and sync check).

Keras: always tf_keras (Keras 2), with TF_USE_LEGACY_KERAS=1 set before TensorFlow is imported, in every
mode. Keras 3 fails under ParameterServerStrategy and MultiWorkerMirroredStrategy
(environment-feasibility.md §3), and one Keras for single-process and distributed runs keeps their
figures comparable.

- `resnet50`: `tf_keras.applications.ResNet50(weights=None)`: ResNet v1 (the stride sits in the first
  1×1 conv of a bottleneck; torchvision's v1.5 puts it in the 3×3 conv) with conv biases: 25,583,592
  trainable parameters for 1000 classes (torchvision: 25,557,032). The classifier gives logits.
- `small`: the same 4-block ResNet as models_torch.SmallResNet: a 3×3 stem (32 channels), basic residual
  blocks 32→32, 32→64, 64→128, 128→256 (strides 1, 2, 2, 2), global average pool, dense classifier.

Input files (`data: files`, format in imagefiles.py) are read with TensorFlow ops only: `tf.io.read_file`,
then the last H·W·3 bytes (a format-1.0 .npy file is a header followed by the C-ordered uint8 array,
whose shape the first file's header gives) decoded with `tf.io.decode_raw`. No `tf.py_function` /
`tf.numpy_function`: those run Python in the process that executes the pipeline, which under
ParameterServerStrategy is a remote worker without the coordinator's Python functions, and they hold
the GIL. The per-image work is imagefiles' decode: scale to [0, 1], normalise with the ImageNet mean
and std.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kaliper import settings
from kaliper.benchmarks.cnn.imagefiles import IMAGENET_MEAN, IMAGENET_STD, image_files, read_image
from kaliper.benchmarks.measurement import MetricDef
from kaliper.errors import WorkloadError

MODELS = ("resnet50", "small")
LEARNING_RATE = 0.01
MOMENTUM = 0.9  # as cnn_torch: torch.optim.SGD(lr=0.01, momentum=0.9)
OPTIMIZER = f"tf_keras.optimizers.SGD(learning_rate={LEARNING_RATE}, momentum={MOMENTUM})"


def load_keras() -> Any:
    """tf_keras, with TF_USE_LEGACY_KERAS=1 so that `tf.keras` is the same Keras 2 as well."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tf_keras

    return tf_keras


def set_precision(keras: Any, precision: str) -> str:
    """The global Keras dtype policy for `precision` (bf16: compute in bfloat16, variables in float32)."""
    policy = "mixed_bfloat16" if precision == "bf16" else "float32"
    keras.mixed_precision.set_global_policy(policy)
    return policy


def make_optimizer(keras: Any) -> Any:
    return keras.optimizers.SGD(learning_rate=LEARNING_RATE, momentum=MOMENTUM)


def _basic_block(keras: Any, x: Any, filters: int, stride: int, name: str) -> Any:
    layers = keras.layers
    shortcut = x
    if stride != 1 or x.shape[-1] != filters:
        shortcut = layers.Conv2D(filters, 1, strides=stride, use_bias=False, name=f"{name}_proj")(x)
        shortcut = layers.BatchNormalization(name=f"{name}_proj_bn")(shortcut)
    y = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False, name=f"{name}_conv1")(x)
    y = layers.BatchNormalization(name=f"{name}_bn1")(y)
    y = layers.ReLU(name=f"{name}_relu1")(y)
    y = layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_conv2")(y)
    y = layers.BatchNormalization(name=f"{name}_bn2")(y)
    y = layers.Add(name=f"{name}_add")([y, shortcut])
    return layers.ReLU(name=f"{name}_out")(y)


def small_resnet(keras: Any, image_size: int, num_classes: int) -> Any:
    layers = keras.layers
    inputs = keras.Input((image_size, image_size, 3), name="images")
    x = layers.Conv2D(32, 3, padding="same", use_bias=False, name="stem_conv")(inputs)
    x = layers.BatchNormalization(name="stem_bn")(x)
    x = layers.ReLU(name="stem_relu")(x)
    for i, (filters, stride) in enumerate(((32, 1), (64, 2), (128, 2), (256, 2))):
        x = _basic_block(keras, x, filters, stride, f"block{i + 1}")
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    logits = layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return keras.Model(inputs, logits, name="small_resnet")


def build_model(keras: Any, name: str, image_size: int, num_classes: int) -> Any:
    """The named model, freshly initialised, giving float32 logits whatever the dtype policy."""
    shape = (image_size, image_size, 3)
    if name == "resnet50":
        return keras.applications.ResNet50(
            weights=None, classes=num_classes, input_shape=shape, classifier_activation=None
        )
    if name == "small":
        return small_resnet(keras, image_size, num_classes)
    raise WorkloadError(f"unknown model {name!r} (models: {', '.join(MODELS)})")


def replica_step(tf: Any, keras: Any, model: Any, optimizer: Any, train: bool, global_batch: int) -> Any:
    """What one replica does per step: (images, labels) -> a float32 scalar to fetch.

    Train: forward, loss (mean over the global batch, so summed replica gradients are the global mean),
    gradients, SGD update (an all-reduce of gradients under MultiWorkerMirroredStrategy; a push to the
    PS under ParameterServerStrategy). Infer: forward only; returns the sum of the logits.
    """

    def train_fn(images: Any, labels: Any) -> Any:
        with tf.GradientTape() as tape:
            logits = tf.cast(model(images, training=True), tf.float32)
            per_example = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    def infer_fn(images: Any, labels: Any) -> Any:
        del labels
        return tf.reduce_sum(tf.cast(model(images, training=False), tf.float32))

    return train_fn if train else infer_fn


def synthetic_batch(tf: Any, batch: int, image_size: int, num_classes: int, seed: int = 0) -> tuple[Any, Any]:
    """A fixed batch: images ~ N(0, 1) (what normalised images look like), uniform labels."""
    images = tf.random.stateless_normal((batch, image_size, image_size, 3), seed=(seed, 1))
    labels = tf.random.stateless_uniform((batch,), seed=(seed, 2), maxval=num_classes, dtype=tf.int32)
    return images, labels


class ImageFiles:
    """The files of a data directory: paths, labels and the stored image shape (from the first header)."""

    def __init__(self, directory: Path) -> None:
        found = image_files(directory)
        if not found:
            raise WorkloadError(f"data_dir {directory}: no class<k>_<i>.npy image files")
        self.directory = directory
        self.paths = [str(path) for path, _ in found]
        self.labels = [label for _, label in found]
        first = read_image(found[0][0])
        if not first.flags.c_contiguous:
            raise WorkloadError(f"{found[0][0]}: expected a C-ordered array")
        self.height, self.width = int(first.shape[0]), int(first.shape[1])

    def dataset(
        self, tf: Any, image_size: int, batch: int, workers: int, shards: int = 1, shard: int = 0
    ) -> Any:
        """Shuffled, repeated, decoded in `workers` parallel calls (0 = AUTOTUNE), batched, prefetched."""
        height, width = self.height, self.width
        nbytes = height * width * 3
        mean = tf.constant(IMAGENET_MEAN, tf.float32)
        std = tf.constant(IMAGENET_STD, tf.float32)

        def decode(path: Any, label: Any) -> tuple[Any, Any]:
            raw = tf.io.read_file(path)
            pixels = tf.io.decode_raw(
                tf.strings.substr(raw, tf.strings.length(raw) - nbytes, nbytes), tf.uint8
            )
            image = tf.reshape(pixels, (height, width, 3))
            scaled = tf.cast(image, tf.float32) / 255.0
            if (height, width) != (image_size, image_size):
                scaled = tf.image.resize(scaled, (image_size, image_size))
            return (scaled - mean) / std, label

        data = tf.data.Dataset.from_tensor_slices((self.paths, self.labels))
        if shards > 1:
            data = data.shard(shards, shard)
        data = data.shuffle(len(self.paths), seed=0, reshuffle_each_iteration=True).repeat()
        data = data.map(decode, num_parallel_calls=workers or tf.data.AUTOTUNE, deterministic=False)
        return data.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


# ---------------------------------------------------------------------------------------------- cluster

PEER_EXIT_WAIT_S = 120.0
PEER_EXIT_GRACE_S = 0.5


@dataclass(frozen=True)
class ClusterConfig:
    """TF_CONFIG as the TFJob operator sets it: {"cluster": {type: [host:port]}, "task": {type, index}}."""

    raw: dict[str, Any] | None
    cluster: dict[str, list[str]]
    task_type: str
    task_index: int

    @classmethod
    def from_env(cls) -> ClusterConfig:
        text = (settings.current()[settings.TF_CONFIG] or "").strip()
        if not text:
            return cls(None, {}, "", 0)
        try:
            raw = json.loads(text)
            cluster = {str(k): [str(a) for a in v] for k, v in raw.get("cluster", {}).items()}
            task = raw.get("task", {})
            return cls(raw, cluster, str(task.get("type", "")), int(task.get("index", 0)))
        except (ValueError, TypeError, AttributeError) as exc:
            raise WorkloadError(f"TF_CONFIG is not a TensorFlow cluster config: {exc}: {text[:200]}") from exc

    @property
    def size(self) -> int:
        return sum(len(addresses) for addresses in self.cluster.values())

    @property
    def mode(self) -> str:
        if self.size <= 1:
            return "single"
        return "ps" if self.cluster.get("ps") else "multiworker"

    @property
    def trainers(self) -> list[tuple[str, int]]:
        """Tasks that run steps under MultiWorkerMirroredStrategy, in TF's order (chief first)."""
        return [(t, i) for t in ("chief", "worker") for i in range(len(self.cluster.get(t, [])))]

    def check(self) -> None:
        supported = {"single": ("", "chief", "worker"), "ps": ("chief", "worker", "ps")}
        allowed = supported.get(self.mode, ("chief", "worker"))
        if self.task_type not in allowed or not set(self.cluster) <= {"chief", "worker", "ps"}:
            raise WorkloadError(
                f"TF_CONFIG task {self.task_type!r} in cluster {sorted(self.cluster)}: the TensorFlow CNN "
                "workloads run Chief, Worker and PS replicas only (ParameterServerStrategy needs a Chief as "
                "coordinator; no Master or Evaluator)"
            )
        if self.mode == "ps" and not self.cluster.get("chief"):
            raise WorkloadError(
                "ParameterServerStrategy needs a Chief replica as coordinator (TFJob Chief: 1)"
            )
        if self.mode == "ps" and not self.cluster.get("worker"):
            raise WorkloadError("ParameterServerStrategy needs at least one Worker replica")


def serve(tf: Any, config: ClusterConfig, threads: dict[str, Any]) -> None:
    """A PS-strategy worker or parameter server: run a gRPC server until the process is stopped."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    proto = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=threads["tf_intra_op"],
        inter_op_parallelism_threads=max(2, threads["tf_inter_op"]),
    )
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=config.task_type,
        task_index=config.task_index,
        protocol=resolver.rpc_layer or "grpc",
        config=proto,
        start=True,
    )
    print(
        f"kaliper: {config.task_type}-{config.task_index} serving {server.target} for the chief; it writes "
        "no result record and runs until the job stops it",
        file=sys.stderr,
        flush=True,
    )
    server.join()
    raise WorkloadError(f"the {config.task_type} server stopped by itself")  # join() never returns


def params_digest(variables: list[Any]) -> bytes:
    """SHA-256 over this task's copy of the weights (names and bytes, in model order)."""
    digest = hashlib.sha256()
    for variable in variables:
        digest.update(variable.name.encode())
        digest.update(variable.numpy().tobytes())
    return digest.digest()


def wait_for_peers(config: ClusterConfig, me: tuple[str, int], timeout_s: float = PEER_EXIT_WAIT_S) -> None:
    """At the leader's exit: wait until the other tasks no longer accept connections (they have stored
    their records and exited), so the job's success does not stop them first. Bounded by `timeout_s`."""
    peers = [
        address
        for task, addresses in config.cluster.items()
        for index, address in enumerate(addresses)
        if (task, index) != me
    ]
    waited = bool(peers)
    deadline = time.monotonic() + timeout_s
    while peers and time.monotonic() < deadline:
        peers = [address for address in peers if _accepts(address)]
        if peers:
            time.sleep(0.2)
    if waited:
        time.sleep(PEER_EXIT_GRACE_S)  # a peer's port closes as it exits: let that exit finish first


def _accepts(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


FORWARD_FLOPS_FORMULA = (
    "sum over the model's Keras layers of one image's forward pass: Conv2D 2·Ho·Wo·Kh·Kw·(Cin/groups)·Cout, "
    "Dense 2·in·out (2 FLOP per multiply-add, the formulas torch.utils.flop_counter uses, so `small` "
    "counts the same in both frameworks); batch norm, ReLU, pooling, the residual adds, biases and the "
    "loss are not counted"
)


def forward_flops_per_image(model: Any) -> int:
    """Model FLOPs of one image's forward pass from the layers' shapes (TensorFlow has no counter that
    counts only what torch's counts: tf.profiler's float_operation adds element-wise ops)."""
    total = 0
    for layer in model.layers:
        if hasattr(layer, "layers"):  # a nested model
            total += forward_flops_per_image(layer)
        elif type(layer).__name__ == "Conv2D":
            kh, kw, cin_per_group, cout = (int(d) for d in layer.kernel.shape)
            _, ho, wo, _ = layer.output_shape
            total += 2 * int(ho) * int(wo) * kh * kw * cin_per_group * cout
        elif type(layer).__name__ == "Dense":
            fan_in, fan_out = (int(d) for d in layer.kernel.shape)
            total += 2 * fan_in * fan_out
    return total


def model_flops(
    metrics: dict[str, MetricDef], model: Any, train: bool
) -> tuple[dict[str, MetricDef], dict[str, Any]]:
    """`metrics` plus `model_tflops` (model FLOPs per image × images_per_s of this replica), and the count
    with its formulas for `derived.flops`."""
    forward = forward_flops_per_image(model)
    per_image = (3 if train else 1) * forward
    formula = f"{'3 * ' if train else ''}forward_flops_per_image * images_per_s / 1e12 (derived.flops)"
    rate = metrics["images_per_s"].scaled(per_image, "TFLOP/s", formula, per=1e12)
    return {**metrics, "model_tflops": rate}, {
        "forward_per_image": forward,
        "per_image": per_image,
        "forward_formula": FORWARD_FLOPS_FORMULA,
        "step_formula": "3 × forward per image × batch_size (the backward pass costs two forwards: "
        "gradients of the inputs and of the weights; the SGD update is not counted)"
        if train
        else "forward per image × batch_size",
    }
