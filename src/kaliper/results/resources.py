"""A run's resources block (`kaliper.resources/v1`, `runs/<repetition>/resources.json`): stored once, read back.

Result records are never rewritten, so what a run used lives beside them. The local executor stores it
from its own sampling when no Prometheus is configured; otherwise the commands that write a report store
what Prometheus answered before the report (kaliper.execution.cluster_documents), whatever it is (figures,
or why there are none), so a rerun of the reporter reads the same document back and gives the same report.
"""

from __future__ import annotations

from typing import Any, Final

from kaliper.results.documents import RESOURCES_SCHEMA, ResourcesDoc, load_versioned, to_document
from kaliper.storage import Storage, layout

IDS: Final = ("schema", "experiment", "trial", "repetition")


def block_of(doc: ResourcesDoc) -> dict[str, Any]:
    """The `resources` block of a stored document (its ids dropped; they are the run's)."""
    document = to_document(doc)
    return {k: v for k, v in document.items() if k not in IDS and v is not None}


def load_resources(storage: Storage, key: str) -> dict[str, Any]:
    return block_of(load_versioned(ResourcesDoc, RESOURCES_SCHEMA, storage.get(key), storage.location(key)))


def store_resources(
    storage: Storage, experiment: str, trial: str, repetition: int, block: dict[str, Any]
) -> dict[str, Any]:
    """Validate and store a run's block once; the stored form is returned (what reruns will read)."""
    doc = ResourcesDoc.model_validate(
        {"experiment": experiment, "trial": trial, "repetition": repetition, **block}
    )
    storage.put_json(layout.resources_key(experiment, trial, repetition), to_document(doc))
    return block_of(doc)


def unavailable(reason: str, source: str | None = None) -> dict[str, Any]:
    """The block of a run without resource figures, saying why."""
    return {"available": False, "source": source, "reason": reason, "figures": {}, "missing": {}}
