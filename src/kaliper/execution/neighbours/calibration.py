"""This machine's history of the calibration probe (kaliper.monitoring.probe), per hardware fingerprint.

A probe slower than its own history says the machine is slower now than it usually is. The history is a
small JSON-lines file per fingerprint, `KALIPER_CALIBRATION_DIR` or `~/.cache/kaliper/calibration/`
`<fingerprint>.jsonl`, one line per probe: `{"key", "rate", "unit", "at"}` (`key` is `ProbeResult.key`:
kernel text and thread mode, so a changed kernel starts a new history). It keeps the last `KEEP` lines.

The fingerprint hashes what makes probe rates comparable: CPU model, logical cores, architecture and
host name (another machine with the same CPU has its own history: neighbours differ). Only probes of runs
whose CPU signals were quiet are added (`CalibrationStore.add`'s caller decides), so a busy period does
not drag the history down. A run is judged against the spread of the last 40 rates (ProbeHistory.spread:
one run's pair, or 5%, left out at each end): a probe regime of this machine (the GPU VM's 40 and 58
GFLOP/s) is inside it once it has shown up in more than 5% of them, and so is a machine that really
became slower (no neighbours, still slower) after two runs. Pre-flight seeds a short history with a
burst of probes (kaliper.execution.neighbours.preflight), so the regimes are known before the first run is
judged.

The store is a cache, never a record: unreadable lines are skipped, and when it cannot be written the
run goes on without (a warning once).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import socket
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Final

from kaliper import settings
from kaliper.monitoring.probe import ProbeHistory, ProbeResult

CALIBRATION_DIR_ENV: Final = settings.CALIBRATION_DIR.name
KEEP: Final = 200


def calibration_dir() -> Path:
    given = settings.current()
    configured = (given[settings.CALIBRATION_DIR] or "").strip()
    if configured:
        return Path(configured).expanduser()
    cache_home = (given[settings.XDG_CACHE_HOME] or "").strip()
    base = Path(cache_home).expanduser() if cache_home else Path.home() / ".cache"
    return base / "kaliper" / "calibration"


def cpu_model() -> str:
    """The CPU's model name (`/proc/cpuinfo`), else what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.strip() in ("model name", "Processor", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


@cache
def hardware_fingerprint() -> str:
    """16 hex digits of sha256 over CPU model, logical cores, architecture and host name."""
    parts = [cpu_model(), str(os.cpu_count() or 0), platform.machine(), socket.gethostname()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


class CalibrationStore:
    """The probe history of one fingerprint (default: this machine's) in `folder` (default: the cache)."""

    def __init__(self, folder: Path | None = None, fingerprint: str | None = None) -> None:
        self.folder = folder if folder is not None else calibration_dir()
        self.fingerprint = fingerprint or hardware_fingerprint()
        self._warned = False

    @property
    def path(self) -> Path:
        return self.folder / f"{self.fingerprint}.jsonl"

    def rates(self, key: str) -> list[float]:
        """Past rates of probes with this key, oldest first."""
        rates = []
        for line in self._lines():
            try:
                entry = json.loads(line)
                if entry.get("key") == key:
                    rates.append(float(entry["rate"]))
            except (ValueError, TypeError, KeyError, AttributeError):
                continue  # a torn or foreign line: the history is a cache
        return rates

    def history(self, key: str) -> ProbeHistory:
        return ProbeHistory.of(self.rates(key))

    def add(self, result: ProbeResult) -> None:
        """Append one probe; keep the last KEEP lines (rewritten atomically when over the bound)."""
        self.add_many([result])

    def add_many(self, results: Sequence[ProbeResult]) -> None:
        """Append several probes at once (a run's two ends, a pre-flight burst): one write."""
        if not results:
            return
        at = datetime.now(UTC).isoformat(timespec="seconds")
        added = [
            json.dumps({"key": r.key, "rate": r.rate, "unit": r.unit, "at": at}, sort_keys=True)
            for r in results
        ]
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            lines = [*self._lines(), *added]
            if len(lines) > KEEP:
                self._replace(lines[-KEEP:])
            else:
                with open(self.path, "a", encoding="utf-8") as file:
                    file.write("".join(f"{line}\n" for line in added))
        except OSError as exc:
            if not self._warned:
                print(f"warning: calibration history {self.path} not updated: {exc}", file=sys.stderr)
                self._warned = True

    def _lines(self) -> list[str]:
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if line.strip()]

    def _replace(self, lines: list[str]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".calibration-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                file.write("".join(f"{line}\n" for line in lines))
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
