"""Trace replay (ARCHITECTURE.md, "Trace replay"): record a PyTorch execution trace, replay its operators."""

from __future__ import annotations

from typing import Final

# glibc malloc keeping its memory (no mmap per large block, no trimming): the recording and every replay
# run under these, or the two processes' allocators cache memory differently and fidelity wanders
# (0.69-1.76 measured without, 0.96-0.98 with). glibc reads them at start-up only, so they are set in the
# environment of the process (the recorder's child; the replay's container env, kaliper.benchmarks.catalog).
MALLOC_ENV: Final = {"MALLOC_MMAP_THRESHOLD_": "1000000000", "MALLOC_TRIM_THRESHOLD_": "1000000000"}
