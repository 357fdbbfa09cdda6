"""Image files for the real-input-pipeline mode of the CNN workloads (`data: files`), for every framework.

Format (numpy only, so PyTorch and TensorFlow read it without an image library):

- one image per file, `class<k>_<i>.npy`: k = the label (0 ≤ k < num_classes), i = the image's index
  (zero-padded to 6 digits when generated; readers accept any digits: `class(\\d+)_(\\d+)\\.npy`);
- the file is a standard `.npy` file (`numpy.save`, format 1.0) holding a C-contiguous uint8 array of
  shape (H, W, 3), RGB, channels last, values 0..255;
- `kaliper-images.json` beside them records how they were generated (count, image_size, num_classes,
  seed, format). It is written last, so its presence marks a complete directory.

Readers decode with `numpy.load`, scale to [0, 1] and normalise with the ImageNet mean and std
(`IMAGENET_MEAN`, `IMAGENET_STD`); that decode is the per-image work of the input pipeline.

Pixels are uniform random noise from `numpy.random.default_rng(seed)`; labels are uniform in
[0, num_classes). The same arguments always give byte-identical files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kaliper.errors import WorkloadError

FILE_PATTERN = re.compile(r"^class(\d+)_(\d+)\.npy$")
MANIFEST = "kaliper-images.json"
FORMAT = "kaliper.images/v1: class<k>_<i>.npy, uint8 HxWx3 RGB (numpy.save)"
IMAGES_PER_BATCH = 8  # ensure_image_files generates batch_size * 8 images: 8 distinct batches per epoch
DEFAULT_SEED = 0
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def generate_image_files(
    directory: str | os.PathLike[str], count: int, image_size: int, num_classes: int, seed: int = DEFAULT_SEED
) -> Path:
    """Write `count` random image_size×image_size RGB images with labels into `directory`; returns it."""
    if count < 1 or image_size < 1 or num_classes < 1:
        raise ValueError(
            f"count, image_size and num_classes must be >= 1 (got {count}, {image_size}, {num_classes})"
        )
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, size=count)
    for index, label in enumerate(labels):
        image = rng.integers(0, 256, size=(image_size, image_size, 3), dtype=np.uint8)
        np.save(path / f"class{int(label)}_{index:06d}.npy", image, allow_pickle=False)
    manifest = {
        "format": FORMAT,
        "count": count,
        "image_size": image_size,
        "num_classes": num_classes,
        "seed": seed,
    }
    (path / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return path


def image_files(directory: str | os.PathLike[str]) -> list[tuple[Path, int]]:
    """The image files in `directory` with their labels, sorted by name."""
    path = Path(directory)
    found = []
    for entry in sorted(path.iterdir()) if path.is_dir() else []:
        match = FILE_PATTERN.match(entry.name)
        if match and entry.is_file():
            found.append((entry, int(match.group(1))))
    return found


def read_image(path: str | os.PathLike[str]) -> npt.NDArray[np.uint8]:
    """One image as uint8 (H, W, 3)."""
    array = np.load(path, allow_pickle=False)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3:
        raise WorkloadError(f"{path}: expected a uint8 H×W×3 array, found {array.dtype} {array.shape}")
    return array  # type: ignore[no-any-return]


def normalise(image: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    """uint8 H×W×3 → float32 3×H×W, scaled to [0, 1] and normalised with the ImageNet mean and std."""
    scaled = image.astype(np.float32) / np.float32(255.0)
    mean = np.asarray(IMAGENET_MEAN, dtype=np.float32)
    std = np.asarray(IMAGENET_STD, dtype=np.float32)
    return np.ascontiguousarray(((scaled - mean) / std).transpose(2, 0, 1))


def _is_complete(path: Path, count: int) -> bool:
    return (path / MANIFEST).is_file() and len(image_files(path)) >= count


def ensure_image_files(params: Mapping[str, Any]) -> Path:
    """The directory of image files a CNN workload reads, generating them when there are none.

    `params`: the workload's parameters (`data_dir`, `batch_size`, `image_size`, `num_classes`).
    - `data_dir` set and holding `class<k>_<i>.npy` files: used as it is.
    - `data_dir` set but without such files: batch_size × 8 images are generated into it.
    - `data_dir` empty: batch_size × 8 images are generated once into a cache directory under the
      system temp dir named after their shape, and reused by later runs with the same shape.
    Generation goes to a private temp directory renamed into place, so replicas of one job that start
    together never read a half-written directory.
    """
    count = int(params["batch_size"]) * IMAGES_PER_BATCH
    image_size = int(params["image_size"])
    num_classes = int(params["num_classes"])
    data_dir = str(params.get("data_dir") or "")
    if data_dir:
        target = Path(data_dir)
        if image_files(target):
            return target
    else:
        name = f"kaliper-images-{image_size}px-n{count}-c{num_classes}-s{DEFAULT_SEED}"
        target = Path(tempfile.gettempdir()) / name
        if _is_complete(target, count):
            return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    generate_image_files(staging, count, image_size, num_classes, DEFAULT_SEED)
    try:
        os.rename(staging, target)  # atomic; replaces `target` only when it is an empty directory
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if data_dir and image_files(target):
            return target  # another replica generated them first
        if not data_dir and _is_complete(target, count):
            return target
        if data_dir:
            raise WorkloadError(
                f"data_dir {data_dir}: no class<k>_<i>.npy image files in it, and generating them "
                "there failed (is it a writable directory, empty or absent?)"
            ) from None
        # A damaged cache (e.g. partly cleaned temp dir): use a private copy for this run.
        fallback = Path(tempfile.mkdtemp(prefix=f"{target.name}-"))
        return generate_image_files(fallback, count, image_size, num_classes, DEFAULT_SEED)
    return target
