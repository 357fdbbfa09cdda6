"""Train a small Keras CNN on generated images, printing tf_cnn_benchmarks-style throughput.

Plain tf.keras code (Keras 2, through the tf_keras package), nothing Kaliper-specific. A callback times
every training step and prints it; the run ends with the figure tf_cnn_benchmarks is known for:

    Step 12/40  images/sec: 812.4  (9.8 ms/step)  loss: 2.3012
    ----------------------------------------------------------------
    total images/sec: 805.17
    ----------------------------------------------------------------

`total images/sec` is the images of the steps after the warm-up divided by their summed step time.

    python keras_cnn.py --batch-size 32 --steps 40
"""

from __future__ import annotations

import argparse
import os
import time

# Keras 2 (tf_keras): set before TensorFlow is imported, so that tf.keras is the same Keras as tf_keras.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import tf_keras as keras


def small_cnn(image_size: int, num_classes: int, width: int = 32) -> keras.Model:
    """Three conv-BN-ReLU stages (the last two halve the resolution), global pooling, a dense head."""
    inputs = keras.Input(shape=(image_size, image_size, 3))
    x = inputs
    for filters, strides in ((width, 1), (2 * width, 2), (4 * width, 2)):
        x = keras.layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(num_classes)(x)
    return keras.Model(inputs, outputs, name="small_cnn")


class StepTimer(keras.callbacks.Callback):
    """Times each training step (the loss in `logs` is a host value, so the step has finished)."""

    def __init__(self, batch_size: int, steps: int, warmup: int) -> None:
        super().__init__()
        self.batch_size, self.steps, self.warmup = batch_size, steps, warmup
        self.timed: list[float] = []  # step times after the warm-up, seconds

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        elapsed = time.perf_counter() - self._t0
        step = batch + 1
        if step > self.warmup:
            self.timed.append(elapsed)
        loss = float((logs or {}).get("loss", float("nan")))
        print(
            f"Step {step}/{self.steps}  images/sec: {self.batch_size / elapsed:.1f}  "
            f"({elapsed * 1000:.1f} ms/step)  loss: {loss:.4f}",
            flush=True,
        )

    def on_train_end(self, logs: dict | None = None) -> None:
        print("-" * 64)
        if self.timed:
            print(f"total images/sec: {self.batch_size * len(self.timed) / sum(self.timed):.2f}")
        else:
            print(f"total images/sec: n/a (no step after the {self.warmup} warm-up steps)")
        print("-" * 64, flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=40, help="training steps to run")
    parser.add_argument("--num-warmup-batches", type=int, default=2, help="steps left out of the total")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--threads", type=int, default=0, help="TensorFlow intra-op threads (0: default)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.threads > 0:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    keras.utils.set_random_seed(args.seed)

    # Generated data: a few batches of random images and labels, repeated for as many steps as asked.
    rng = np.random.default_rng(args.seed)
    n = 4 * args.batch_size
    images = rng.standard_normal((n, args.image_size, args.image_size, 3), dtype=np.float32)
    labels = rng.integers(0, args.num_classes, size=n)
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(args.batch_size).repeat()
    dataset = dataset.prefetch(tf.data.AUTOTUNE)

    model = small_cnn(args.image_size, args.num_classes)
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    print(
        f"TensorFlow {tf.__version__} (tf_keras {keras.__version__}) | {model.name} "
        f"{model.count_params() / 1e6:.2f}M parameters | batch {args.batch_size} | "
        f"{args.image_size}x{args.image_size} images",
        flush=True,
    )
    timer = StepTimer(args.batch_size, args.steps, args.num_warmup_batches)
    model.fit(dataset, epochs=1, steps_per_epoch=args.steps, callbacks=[timer], verbose=0)


if __name__ == "__main__":
    main()
