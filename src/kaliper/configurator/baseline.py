"""A spec's named baseline checked before a run writes anything (`kaliper run`, the cluster's configure
step): a baseline that is not in storage would only be found missing by the report, after every trial ran."""

from __future__ import annotations

from kaliper.errors import NotFoundError
from kaliper.results.readers import experiment_stored
from kaliper.spec.services import ReportSpec
from kaliper.storage import Storage


def require_named_baseline(storage: Storage, settings: ReportSpec, experiment_id: str, source: str) -> None:
    """The experiment `report.baseline` names must be in `storage`, else every trial would run only for the
    report to find nothing to compare with. `previous` (none yet is fine) and `none` pass, and so does the
    experiment itself (the report then says so)."""
    base = settings.baseline
    if base in ("previous", "none") or base == experiment_id or experiment_stored(storage, base):
        return
    raise NotFoundError(
        f"{source}: report.baseline: experiment {base} not found in storage {storage.url}; name an "
        "experiment stored there, or use `previous` (the latest earlier one) or `none`; nothing was run"
    )
